"""A new metric on every train row is one entry of ROW_METRICS: the row carries its mean over the row's
steps, a checkpoint taken mid-row keeps its sum, and a resumed run writes the same rows."""

from __future__ import annotations

import pytest
from helpers import compose_config, typed

from mltrain.run import Session, build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.training.rows import ROW_METRICS, row_metric

TIMES = ("time_s", "train_time_s", "tokens_per_s")
ARGS = ("train.max_steps=12", "train.log_interval=4", "coarsening=evenodd", "multilevel.n_cycles=1",
        "multilevel.coarse_steps=4", "multilevel.coarse_log_interval=4")


@pytest.fixture
def metrics():
    """Two row metrics for the test only: one kept on the device, one a host number."""
    row_metric("train/loss_x2")(lambda step: step.loss * 2)
    row_metric("lr_seen")(lambda step: step.lr)
    yield
    del ROW_METRICS["train/loss_x2"], ROW_METRICS["lr_seen"]


def built() -> tuple[Session, list[dict]]:
    """A session whose every metrics row goes into the list returned with it (given to `build`: a
    trainer's `emit` is set once, when it is built)."""
    rows: list[dict] = []
    return build(typed(compose_config(*ARGS)), rows.append), rows


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMES} for row in rows if "train/loss" in row]


def test_every_train_row_carries_each_row_metric_as_its_mean_over_the_steps(metrics):
    session, rows = built()
    assert session.runner.run()
    written = [row for row in rows if "train/loss" in row]
    assert {row["phase"] for row in written} == {"fine", "coarse"}
    for row in written:
        assert row["train/loss_x2"] == pytest.approx(2 * row["train/loss"], rel=1e-6)
        assert isinstance(row["train/loss_x2"], float) and isinstance(row["lr_seen"], float)
    # the mean over the row's 4 steps, not the last step's value: the cosine LR falls within the row
    late = [row for row in written if row["phase"] == "fine" and row["step"] >= 8]
    assert late and all(row["lr_seen"] > row["lr"] for row in late)


def test_a_checkpoint_mid_row_keeps_the_metrics_sums_and_the_resumed_rows_are_the_same(metrics, tmp_path):
    whole, expected = built()
    assert whole.runner.run()

    first, before = built()
    # stopped between rows: fine step 10 of 12 (log_interval 4), two steps of the last row pending
    assert not first.runner.run(should_stop=lambda: first.trainer.state.fine_steps >= 10)
    assert first.trainer.pending_state()["fine"]["sums"]["train/loss_x2"].numel() == 1
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed, after = built()
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()
    assert without_times(before + after) == without_times(expected)
    assert all("train/loss_x2" in row and "lr_seen" in row for row in without_times(after))


def test_a_trainers_emit_is_the_one_it_was_built_with():
    """Rows go where `build` was told from the trainer's construction on; nothing rebinds it later."""
    session, rows = built()
    with pytest.raises(AttributeError):
        session.trainer.emit = print  # type: ignore[misc]
    session.evaluator.log_eval(session.runner.fine)
    assert [row["val/loss"] for row in rows] == [session.trainer.last_loss["val"]]
