"""The GPU step's two speed options (model.pad_vocab_to, model.loss_chunk), off by default: each changes
nothing it should not, checked on the CPU."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import compose_config, saved_run, typed

from mltrain.core.errors import ConfigError
from mltrain.model.memory import parameter_count
from mltrain.model.gpt import GPT, GPTConfig, padded_vocab
from mltrain.runs.weights import load_weights
from mltrain.tools.export import HF_CONFIG, HF_WEIGHTS, export
from mltrain.tools.sample import generate

SHAPE = dict(n_layer=2, n_embd=32, n_head=2, block_size=16)
PAPER = dict(vocab_size=50257, n_layer=12, n_head=8, n_embd=256, block_size=256)


def _padded_copy(model: GPT, pad: int) -> GPT:
    """`model` with its vocabulary padded to a multiple of `pad`: the same weights, the padded rows large, so
    that any padded logit that reached a loss or a sample would dominate it."""
    padded = GPT(GPTConfig(**{**vars(model.config), "pad_vocab_to": pad}))
    state = dict(model.state_dict())
    vocab = model.config.vocab_size
    wte = torch.randn(padded_vocab(padded.config), model.config.n_embd) * 50
    wte[:vocab] = state["wte.weight"]
    state["wte.weight"] = state["lm_head.weight"] = wte
    padded.load_state_dict(state)
    return padded


def test_the_paper_preset_keeps_its_parameters_unless_the_vocabulary_is_padded():
    assert GPT(GPTConfig(**PAPER)).num_params() == 22_368_512
    padded = GPT(GPTConfig(**PAPER, pad_vocab_to=64))
    assert padded.wte.weight.shape[0] == padded_vocab(padded.config) == 50304
    assert padded.num_params() == 22_368_512 + 47 * 256 == parameter_count(padded.config)[0]
    assert compose_config("scale=paper", tiny=False).model.pad_vocab_to == 1  # off unless asked


def test_a_padded_vocabulary_gives_the_same_logits_and_loss_and_never_predicts_a_padded_id():
    torch.manual_seed(0)
    plain = GPT(GPTConfig(vocab_size=300, **SHAPE))
    padded = _padded_copy(plain, 64)
    assert padded.wte.weight.shape[0] == 320
    idx, targets = torch.randint(0, 300, (3, 16)), torch.randint(0, 300, (3, 16))
    logits, loss = padded(idx, targets)
    want_logits, want_loss = plain(idx, targets)
    assert logits.shape == (3, 16, 300)  # the padded rows' logits are sliced off
    torch.testing.assert_close(logits, want_logits)
    torch.testing.assert_close(loss, want_loss)
    g = torch.Generator().manual_seed(1)
    assert max(generate(padded.eval(), [1, 2], 60, temperature=2.0, generator=g)) < 300


def test_a_padded_run_saves_loads_and_exports_its_real_vocabulary(tmp_path):
    run_dir, model = saved_run(tmp_path, vocab_size=256, pad_vocab_to=64 * 5)  # 256 -> 320 rows
    loaded, _ = load_weights(run_dir)
    assert loaded.wte.weight.shape[0] == 320 and torch.equal(loaded.wte.weight, model.wte.weight)
    out = export(run_dir, tmp_path / "hf")
    assert json.loads((out / HF_CONFIG).read_text())["vocab_size"] == 256
    from safetensors.torch import load_file

    assert load_file(out / HF_WEIGHTS)["transformer.wte.weight"].shape == (256, model.config.n_embd)


@pytest.mark.parametrize("rows", [7, 16, 48])  # uneven chunks, one per sequence, the whole batch at once
def test_chunked_cross_entropy_gives_the_plain_loss_and_gradients(rows):
    torch.manual_seed(0)
    plain = GPT(GPTConfig(vocab_size=300, **SHAPE))
    chunked = GPT(GPTConfig(vocab_size=300, **SHAPE, loss_chunk=rows))
    chunked.load_state_dict(plain.state_dict())
    idx, targets = torch.randint(0, 300, (3, 16)), torch.randint(0, 300, (3, 16))
    targets[0, :4] = -100  # ignored positions are left out of the mean, as F.cross_entropy does
    want = plain(idx, targets)[1]
    logits, loss = chunked(idx, targets)
    assert logits is None  # the whole batch's logits are never built
    torch.testing.assert_close(loss, want)
    want.backward()
    loss.backward()
    for (name, a), b in zip(plain.named_parameters(), chunked.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=name)
    torch.testing.assert_close(chunked(idx)[0], plain(idx)[0])  # without targets: the logits, as before


def test_chunked_cross_entropy_under_bf16_autocast_matches_the_plain_path():
    torch.manual_seed(0)
    plain = GPT(GPTConfig(vocab_size=300, **SHAPE))
    chunked = _padded_copy(plain, 64)
    chunked.config.loss_chunk = 10
    idx, targets = torch.randint(0, 300, (2, 16)), torch.randint(0, 300, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = plain(idx, targets)[1], chunked(idx, targets)[1]
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)  # bf16 matmuls in both; same rounding per row


def test_the_options_are_hydra_overrides_and_bad_values_are_one_line():
    from mltrain.config import validate

    cfg = compose_config("model.pad_vocab_to=64", "model.loss_chunk=512")
    assert (cfg.model.pad_vocab_to, cfg.model.loss_chunk) == (64, 512)
    for bad in ("model.pad_vocab_to=0", "model.loss_chunk=-1"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            validate(typed(compose_config(bad)))
