"""Will it fit: the parameter count comes from the meta device, and a model too big for the memory there
is refused in one line, with its size, before anything is allocated."""

from __future__ import annotations

import pytest
from helpers import NO_ROOM, SMOKE, one_error, run_tool


@pytest.mark.parametrize("overrides,size", [
    (["model.n_layer=64", "model.n_embd=16384", "model.n_head=16"], "206,162,886,656 parameters (64 blocks"),
    (["train.batch_size=20000000"], "logits of a 20000000-sequence micro-batch"),
    # the logits are computed at the padded vocabulary: 100,000 x 16 rows x 1,000,000 columns (TBs), where
    # the real vocabulary's 256 columns would be 3.3 GB and pass
    (["model.pad_vocab_to=1000000", "train.batch_size=100000"], "vocab 256 padded to 1,000,000)"),
])
def test_a_model_that_cannot_fit_is_refused_with_its_size_before_allocating(tmp_path, overrides, size):
    out = tmp_path / "out"
    line = one_error(run_tool("mltrain", *SMOKE, *overrides, f"hydra.run.dir={out}", cwd=tmp_path, limits=NO_ROOM))
    assert "training it needs at least" in line and size in line
    assert not (out / "metrics.jsonl").exists()


def test_the_parameter_count_comes_without_allocating_and_matches_the_model():
    from mltrain.model.memory import parameter_count
    from mltrain.model.gpt import GPT, GPTConfig

    paper = GPTConfig(n_layer=12, n_head=8, n_embd=256, block_size=256, vocab_size=50257)
    assert parameter_count(paper) == (22_368_512, 0)
    small = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256, attention="explicit", bias=True)
    params, buffers = parameter_count(small)
    assert params == GPT(small).num_params() and buffers == 2 * 16 * 16  # one causal mask per block


def test_the_logits_are_priced_as_the_forward_computes_them():
    from mltrain.model.memory import logit_bytes
    from mltrain.model.gpt import GPTConfig

    plain = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)
    assert logit_bytes(plain, 4) == 2 * 4 * 16 * 256 * 4  # fp32 logits and their gradient, as before
    padded = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256, pad_vocab_to=1_000_000)
    assert logit_bytes(padded, 4) == 2 * 4 * 16 * 2 * (1_000_000 + 256)  # every row of the head, 2 bytes at least
    chunked = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256, pad_vocab_to=1_000_000,
                        loss_chunk=8)
    assert logit_bytes(chunked, 4) == 2 * 8 * 2 * (1_000_000 + 256)  # one chunk of 8 rows at a time
