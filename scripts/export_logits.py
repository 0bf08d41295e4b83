"""How closely an `mltrain-export` folder reproduces mltrain's logits in transformers' GPT2LMHeadModel.

Prints max |logits difference| (fp32, CPU) for random models of each LayerNorm/bias variant GPT-2 can hold
and for gpt22m's shape, under HF's eager and sdpa attention. Makes no claim of its own; the test
(tests/test_weights.py) asserts < 1e-4.

    python scripts/export_logits.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel

from mltrain.tools.export import export
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.runs.weights import save_weights

SMALL = dict(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=16)
MODELS = {
    "no bias, plain LN": SMALL,
    "bias, affine LN": {**SMALL, "bias": True, "norm_affine": True},
    "affine LN, no bias": {**SMALL, "norm_affine": True},
    "gpt22m shape": dict(vocab_size=50257, n_layer=12, n_head=8, n_embd=256, block_size=256),
}


def main() -> None:
    for name, shape in MODELS.items():
        torch.manual_seed(0)
        model = GPT(GPTConfig(**shape)).eval()
        with torch.no_grad():  # every parameter random, norms and biases included, so a wrong mapping shows
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        idx = torch.randint(0, model.config.vocab_size, (3, model.config.block_size))
        with tempfile.TemporaryDirectory() as d:
            save_weights(Path(d) / "run", model, "bytes")
            export(Path(d) / "run", Path(d) / "hf")
            with torch.no_grad():
                ours = model(idx)[0]
                for attn in ("eager", "sdpa"):
                    hf = GPT2LMHeadModel.from_pretrained(Path(d) / "hf", attn_implementation=attn).eval()
                    diff = (hf(idx).logits - ours).abs().max().item()
                    print(f"{name:20s} {attn:6s} max|logits diff| = {diff:.3g}  (max|logit| {ours.abs().max():.3g})")


if __name__ == "__main__":
    main()
