"""How a run ends: a signal (finish the step, checkpoint, one line with the resume command, exit 128+N),
a non-finite loss (stop naming the step, level and phase, or skip the step), and summary.json's status."""

import math
import os
import shlex
import signal

import pytest
import torch
from cli_helpers import (SMALL, checkpoints, cli, final_state, kill, load, name_position, one_line, processes_running,
                         rows, start, stderr_of, summary, uninterrupted_run, wait_until, without_time)
from conftest import compose_config

from mltrain.model import GPT
from mltrain.run import RunDiverged, run

# Long enough to be stopped half-way; checkpoints only at the end or on a signal.
LONG = [*SMALL, "train.max_steps=1500", "train.log_interval=7", "train.eval_interval=500",
        "train.checkpoint_interval=0"]


def train_rows_at_least(run_dir, n):
    def ready() -> bool:
        path = run_dir / "metrics.jsonl"
        return path.exists() and path.read_text().count("train/loss") >= n
    return ready


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGUSR1, 138)])
def test_a_signal_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume(tmp_path, sig, code):
    run_dir = tmp_path / "run"
    p = start([*LONG, f"hydra.run.dir={run_dir}"], tmp_path)
    wait_until(p, train_rows_at_least(run_dir, 2))
    assert kill(p, sig) == code
    err = stderr_of(p)
    assert "Traceback" not in err
    line = one_line(err, "resume with:")
    s = summary(run_dir)
    assert f"stopped by {signal.Signals(sig).name} after fine step {s['fine_steps']} of 1500" in line
    assert s["status"] == "interrupted" and 0 < s["fine_steps"] < 1500
    (ckpt,) = checkpoints(run_dir)
    assert name_position(ckpt)[0] == s["fine_steps"] and str(ckpt) in line
    assert load(ckpt)["runner"]["train_state"]["fine_steps"] == s["fine_steps"]  # a whole step, not half of one


@pytest.mark.slow
def test_sigterm_then_the_printed_command_resumes_to_the_same_end_as_an_uninterrupted_run(tmp_path):
    whole = uninterrupted_run(LONG, tmp_path)

    run_dir = tmp_path / "run"
    p = start([*LONG, f"hydra.run.dir={run_dir}"], tmp_path)
    wait_until(p, train_rows_at_least(run_dir, 3))
    assert kill(p, signal.SIGTERM) == 143
    line = one_line(stderr_of(p), "resume with:")
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[0] == "mltrain" and "train.resume=true" in command and f"hydra.run.dir={run_dir}" in command
    assert summary(run_dir)["status"] == "interrupted"

    proc = cli(command[1:], tmp_path)  # the same arguments, via `python -m mltrain.cli`
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(run_dir)["status"] == "finished"
    # stopped between two rows: the part-filled row's loss sum travelled in the checkpoint
    assert without_time(rows(run_dir)) == without_time(rows(whole))
    a, b = final_state(whole), final_state(run_dir)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


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
        run(cfg, run_dir=tmp_path)
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
        run(cfg, run_dir=tmp_path)
    assert summary(tmp_path)["status"] == "diverged"
    assert not checkpoints(tmp_path)  # none was due before, and none is written after a bad step


def test_on_nonfinite_skip_drops_that_step_and_goes_on(tmp_path, monkeypatch, caplog):
    poison(monkeypatch, nth=7)
    cfg = compose_cfg("train.max_steps=20", "train.log_interval=5", "train.on_nonfinite=skip")
    run(cfg, run_dir=tmp_path)
    s = summary(tmp_path)
    assert s["status"] == "finished" and s["skipped_steps"] == 1 and s["fine_steps"] == 20
    assert all(math.isfinite(r["train/loss"]) for r in rows(tmp_path) if "train/loss" in r)
    assert "non-finite loss at fine step 7 (level 0, fine phase): step skipped" in caplog.text


def test_on_nonfinite_must_be_stop_or_skip():
    with pytest.raises(Exception, match="on_nonfinite"):
        compose_cfg("train.on_nonfinite=ignore")


@pytest.mark.slow
def test_a_diverging_run_through_the_cli_ends_with_one_line_and_status_diverged(tmp_path):
    run_dir = tmp_path / "run"
    proc = cli([*SMALL, "optim.lr=1e12", "train.grad_clip=0", "train.max_steps=200", "train.log_interval=1",
                f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = one_line(proc.stderr, "non-finite training loss at fine step")
    assert "(level 0, fine phase)" in line and "train.on_nonfinite=stop" in line
    assert summary(run_dir)["status"] == "diverged"


def test_stop_signals_restore_the_previous_handlers_and_hand_the_signal_on():
    from mltrain.training.resume import StopSignals

    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))  # e.g. submitit's requeue handler
    try:
        with StopSignals() as stop:
            assert not stop.requested()
            signal.raise_signal(signal.SIGUSR1)
            assert stop.requested() and stop.name == "SIGUSR1" and stop.exit_code == 138
            signal.raise_signal(signal.SIGTERM)  # already stopping: nothing more
            with pytest.raises(KeyboardInterrupt):  # but a second Ctrl-C stops at once
                signal.raise_signal(signal.SIGINT)
            assert seen == []  # the run's checkpoint comes first ...
        stop.hand_on()
        assert seen == [signal.SIGUSR1]  # ... then the handler from before gets the signal
        signal.raise_signal(signal.SIGUSR1)
        assert seen == [signal.SIGUSR1] * 2  # and it is installed again
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_job_slurm_started_again_resumes_by_itself(monkeypatch):
    from mltrain.config import resuming

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert not resuming(False) and resuming(True)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # a SLURM job's first start
    assert not resuming(False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")  # requeued (preemption, time-out, scontrol requeue)
    assert resuming(False)


def test_the_slurm_launcher_config_asks_for_the_signal_and_requeues():
    cfg = compose_config("hydra/launcher=slurm", tiny=False, hydra=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.signal_delay_s > 0 and cfg.hydra.launcher.max_num_timeout > 0


@pytest.mark.slow
def test_a_submitit_job_signalled_as_on_preemption_checkpoints_is_requeued_and_resumes_by_itself(tmp_path):
    """SLURM's part played locally: submitit's local executor runs the job (with its own SIGUSR2 handler,
    as on SLURM) and requeues it as SLURM would; SLURM_RESTART_COUNT is set as in a requeued SLURM job."""
    args = [*SMALL, "train.max_steps=1500", "train.log_interval=10", "train.eval_interval=500"]
    whole = tmp_path / "whole"
    assert cli([*args, f"hydra.run.dir={whole}"], tmp_path).returncode == 0

    sweep = tmp_path / "sweep"
    p = start(["-m", "hydra/launcher=submitit_local", *args, f"hydra.sweep.dir={sweep}"], tmp_path,
              env={"SLURM_RESTART_COUNT": "1"})
    job_dir = lambda: next(sweep.glob("*train.max_steps=1500*"), None)  # noqa: E731
    wait_until(p, lambda: job_dir() is not None and train_rows_at_least(job_dir(), 3)())
    (task,) = processes_running("submitit.core._submit", str(sweep))
    os.kill(task, signal.SIGUSR2)  # what SLURM sends signal_delay_s before the end, or on preemption
    assert p.wait(timeout=600) == 0, stderr_of(p)[-3000:]
    log = "".join(f.read_text() for f in (sweep / ".submitit").rglob("*_log.err"))
    assert "stopped by SIGUSR2" in log and "Requeued job" in log and "resuming" in log
    assert summary(job_dir())["status"] == "finished"
    assert without_time(rows(job_dir())) == without_time(rows(whole))
    a, b = final_state(whole), final_state(job_dir())
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


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


def test_on_nonfinite_skip_decided_on_the_device_drops_that_step_and_names_it(tmp_path, monkeypatch, caplog):
    # a fused optimizer skips the update itself (found_inf): no host sync in the step
    poison(monkeypatch, nth=7)
    cfg = compose_cfg("train.max_steps=20", "train.log_interval=5", "train.on_nonfinite=skip", "optim.fused=true")
    run(cfg, run_dir=tmp_path)
    s = summary(tmp_path)
    assert s["status"] == "finished" and s["skipped_steps"] == 1 and s["fine_steps"] == 20
    assert all(math.isfinite(r["train/loss"]) for r in rows(tmp_path) if "train/loss" in r)
    assert "non-finite loss at fine step 7 (level 0, fine phase): step skipped" in caplog.text
    weights = final_state(tmp_path)["model"] if checkpoints(tmp_path) else None
    assert weights is None or all(torch.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize("method", ["experiment=raptr", "experiment=layer_drop", "coarsening=random"])
def test_a_fused_sgd_trains_sub_paths_that_reach_a_block_for_the_first_time(tmp_path, method):
    # each step a new set of blocks: some parameters get their first gradient while others have momentum
    run(compose_cfg("train.max_steps=12", "optim.fused=true", method, "coarsening.redraw=true"
                    if method == "coarsening=random" else "layer_drop.gamma=0.5"), run_dir=tmp_path)
    assert summary(tmp_path)["status"] == "finished"
