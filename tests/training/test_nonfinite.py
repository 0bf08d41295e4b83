"""A non-finite loss: the run stops naming the step, level and coarse model and keeps the last good
checkpoint, or (train.on_nonfinite=skip) drops that step and goes on; a row's losses name their first
non-finite step across folds and a resume."""

import math

import pytest
import torch
from helpers import SMALL, checkpoints, compose_config, final_state, load, name_position, rows, summary, typed

from mltrain.model.gpt import GPT
from mltrain.run import RunDiverged, run


# ---------------------------------------------------------------------------------------------
# Non-finite losses, in-process: a poisoned forward pass makes exactly one chosen step's loss NaN.


def compose_cfg(*overrides):
    return compose_config(*SMALL, *overrides, tiny=False)


def poison(monkeypatch, nth: int, coarse: bool = False):
    """Make the `nth` training forward pass (of a coarse model, if `coarse`) return a NaN loss."""
    original, calls = GPT.forward, [0]

    def forward(self, idx, targets=None, blocks=None, **kwargs):
        logits, loss = original(self, idx, targets, blocks=blocks, **kwargs)
        is_coarse = blocks is not None and len(blocks) < len(self.blocks)
        if self.training and targets is not None and torch.is_grad_enabled() and is_coarse == coarse:
            calls[0] += 1
            if calls[0] == nth:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)


def test_a_nan_loss_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    poison(monkeypatch, nth=7)
    cfg = compose_cfg("train.max_steps=20", "train.log_interval=5", "train.checkpoint_interval=3")
    with pytest.raises(RunDiverged) as err:
        run(typed(cfg), run_dir=tmp_path)
    message = str(err.value)
    assert "non-finite training loss at fine step 7 (level 0, fine phase)" in message and "\n" not in message
    assert "last good checkpoint" in message and "step-000006-00000006.pt" in message
    s = summary(tmp_path)
    assert s["status"] == "diverged" and s["status_reason"] == message
    last = checkpoints(tmp_path)[-1]
    assert name_position(last) == (6, 6)  # the checkpoint due after step 9 was not written
    assert all(torch.isfinite(t).all() for t in load(last)["runner"]["model"].values())


def test_a_nan_in_a_coarse_phase_is_named_by_level_and_coarse_model(tmp_path, monkeypatch):
    # coarse forward passes: the diagnostics' one, then the coarse steps; the 6th is coarse step 5
    poison(monkeypatch, nth=6, coarse=True)
    cfg = compose_cfg("coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=12",
                      "multilevel.coarse_log_interval=4", "train.max_steps=20", "train.checkpoint_interval=0")
    with pytest.raises(RunDiverged, match=r"coarse step 5 of the phase after fine step 1 \(level 1, coarse phase of coarse A\)"):
        run(typed(cfg), run_dir=tmp_path)
    assert summary(tmp_path)["status"] == "diverged"
    assert not checkpoints(tmp_path)  # none was due before, and none is written after a bad step


def test_on_nonfinite_skip_drops_that_step_and_goes_on(tmp_path, monkeypatch, caplog):
    poison(monkeypatch, nth=7)
    # an unfused optimizer: the skip is decided on the host (free on a CPU)
    cfg = compose_cfg("train.max_steps=20", "train.log_interval=5", "train.on_nonfinite=skip", "optim.fused=false")
    run(typed(cfg), run_dir=tmp_path)
    s = summary(tmp_path)
    assert s["status"] == "finished" and s["skipped_steps"] == 1 and s["fine_steps"] == 20
    assert all(math.isfinite(r["train/loss"]) for r in rows(tmp_path) if "train/loss" in r)
    assert "non-finite loss at fine step 7 (level 0, fine phase): step skipped" in caplog.text


def test_on_nonfinite_skip_decided_on_the_device_drops_that_step_and_names_it(tmp_path, monkeypatch, caplog):
    # a fused optimizer skips the update itself (found_inf): no host sync in the step
    poison(monkeypatch, nth=7)
    cfg = compose_cfg("train.max_steps=20", "train.log_interval=5", "train.on_nonfinite=skip", "optim.fused=true")
    run(typed(cfg), run_dir=tmp_path)
    s = summary(tmp_path)
    assert s["status"] == "finished" and s["skipped_steps"] == 1 and s["fine_steps"] == 20
    assert all(math.isfinite(r["train/loss"]) for r in rows(tmp_path) if "train/loss" in r)
    assert "non-finite loss at fine step 7 (level 0, fine phase): step skipped" in caplog.text
    weights = final_state(tmp_path)["model"] if checkpoints(tmp_path) else None
    assert weights is None or all(torch.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize("method", ["experiment=raptr", "experiment=layer_drop", "coarsening=random"])
def test_a_fused_sgd_trains_sub_paths_that_reach_a_block_for_the_first_time(tmp_path, method):
    # each step a new set of blocks: some parameters get their first gradient while others have momentum
    run(typed(compose_cfg("train.max_steps=12", "optim.fused=true", method, "coarsening.redraw=true"
                    if method == "coarsening=random" else "layer_drop.gamma=0.5")), run_dir=tmp_path)
    assert summary(tmp_path)["status"] == "finished"


def test_on_nonfinite_must_be_stop_or_skip():
    with pytest.raises(Exception, match="on_nonfinite"):
        compose_cfg("train.on_nonfinite=ignore")


@pytest.mark.parametrize("bad_at,n_steps", [(3, 10), (300, 600), (599, 600)])
def test_a_rows_losses_name_their_first_non_finite_step_across_folds_and_a_resume(bad_at, n_steps):
    # A row keeps its steps' losses on the device and folds them every COLLAPSE steps: the first
    # non-finite one is still named exactly, before and after a fold and after a checkpoint round trip.
    from mltrain.training.rows import PendingRow

    pending = PendingRow(0.0)
    for i in range(n_steps):
        pending.add(torch.tensor(math.nan if i >= bad_at else 1.0), 8, view=None)
        if i == n_steps // 2:
            pending = PendingRow.from_state(pending.state_dict(), 0.0, torch.device("cpu"))
    assert pending.first_nonfinite() == bad_at and pending.steps == n_steps and pending.tokens == 8 * n_steps
    clean = PendingRow(0.0)
    for i in range(n_steps):
        clean.add(torch.tensor(float(i)), 1, view=None)
    assert clean.first_nonfinite() is None
    assert clean.mean_loss().item() == pytest.approx((n_steps - 1) / 2)
