"""summary.json's `epochs`: the passes over the training split that a run's training batches amount to,
every level's steps included (the coarse phases draw batches from the same split)."""

import pytest
from helpers import ML


def test_epochs_count_fine_and_coarse_batches_against_the_training_split(tmp_path, train_run):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 33)  # 1,485 bytes
    train_tokens = 1485 - round(1485 * 0.05)  # one file: its last val_fraction is validation
    _, s = train_run("data=text", f"data.path={corpus}", *ML, "train.max_steps=8")
    assert s["data"]["train_tokens"] == train_tokens
    # TINY: batch 4, context 16; 8 fine steps, and ML's 3 cycles x 2 coarse models x 4 coarse steps
    assert (s["fine_steps"], s["coarse_steps"]) == (8, 24)
    assert s["epochs"] == pytest.approx((8 + 24) * 4 * 16 / train_tokens)
    assert s["epochs"] > 1  # this corpus is too small for the run: it saw its text more than once
