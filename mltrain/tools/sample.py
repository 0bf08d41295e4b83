"""mltrain-sample: text from a finished run's weights.

    mltrain-sample RUN --prompt "The Python" --max-new-tokens 200 --temperature 0.8 --top-k 40 --seed 0

Reads RUN/model.safetensors and RUN/model.json (mltrain/runs/weights.py), encodes the prompt with the run's
own tokenizer, and samples one token at a time from the last `block_size` tokens (the model has no
positions beyond its context). The same seed gives the same text on the same machine and device.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch

from mltrain.data import Tokenizer, get_tokenizer
from mltrain.errors import ConfigError, tool_main
from mltrain.model import GPT
from mltrain.training.devices import resolve_device
from mltrain.runs.weights import INFO_FILE, load_weights, read_info

PROG = "mltrain-sample"


@torch.no_grad()
def generate(
    model: GPT,
    ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    vocab_limit: Optional[int] = None,
) -> list[int]:
    """`max_new_tokens` token ids sampled after `ids` (not included in the result).

    temperature 0 is greedy (argmax); top_k keeps only the k likeliest tokens; vocab_limit masks ids at
    and above it (a vocabulary padded past the tokenizer's, e.g. 50304, has rows no tokenizer can decode).
    """
    if not ids:
        raise ValueError("generate needs at least one token of context")
    device = model.wte.weight.device
    block_size = model.config.block_size
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -block_size:])
        logits = logits[:, -1, :vocab_limit].float()
        if temperature == 0:
            nxt = logits.argmax(dim=-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.size(-1):
                kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx[0, len(ids):].tolist()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Generate text with a finished run's final weights.")
    p.add_argument("run", help="run directory (holds model.safetensors and model.json)")
    p.add_argument("--prompt", default="", help="text to continue (default: start of a new document)")
    p.add_argument("--max-new-tokens", type=int, default=200, metavar="N", help="tokens to generate (default 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature; 0 is greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="sample only from the K likeliest tokens")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--num-samples", type=int, default=1, metavar="N", help="independent samples (default 1)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: cuda if present")
    return p


def _check(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 0:
        raise ConfigError(f"--max-new-tokens {args.max_new_tokens}: must be >= 0")
    if not args.temperature >= 0:
        raise ConfigError(f"--temperature {args.temperature}: must be >= 0 (0 is greedy)")
    if args.top_k is not None and args.top_k < 1:
        raise ConfigError(f"--top-k {args.top_k}: must be >= 1")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples {args.num_samples}: must be >= 1")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed {args.seed}: must be in [0, 2**63)")


def sample(args: argparse.Namespace) -> list[str]:
    """The samples as text (prompt included). Every input is checked before the weights are read."""
    _check(args)
    info = read_info(args.run)
    tokenizer: Tokenizer = get_tokenizer(str(info.get("tokenizer")), key=f"{args.run}/{INFO_FILE}: tokenizer",
                                         bytes_alternative=False)
    device = resolve_device(args.device)
    prompt_ids = tokenizer.encode(args.prompt) if args.prompt else tokenizer.separator  # a fresh document
    model, _ = load_weights(args.run, device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    vocab_limit = min(tokenizer.n_vocab, model.config.vocab_size)
    return [
        args.prompt + tokenizer.decode(generate(model, prompt_ids, args.max_new_tokens, args.temperature,
                                                args.top_k, generator, vocab_limit))
        for _ in range(args.num_samples)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(PROG, _parser(), lambda args: print("\n\n---\n\n".join(sample(args))), argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
