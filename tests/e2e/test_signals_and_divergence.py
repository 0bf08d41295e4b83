"""How a run ends, through the CLI: a signal finishes the step, writes a checkpoint and prints the
command that resumes it to the same end; a submitit job signalled on preemption is requeued and resumes;
a diverging run ends with one line and status diverged."""

import os
import shlex
import signal

import pytest
import torch
from helpers import (SMALL, checkpoints, cli_here, final_state, kill, load, name_position, one_line,
                     processes_running, rows, start, stderr_of, summary, uninterrupted_run, wait_until, without_time)


# Long enough to be stopped half-way; checkpoints only at the end or on a signal.
LONG = [*SMALL, "train.max_steps=1500", "train.log_interval=7", "train.eval_interval=500",
        "train.checkpoint_interval=0"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """LONG run to its end once: the reference both a resumed run (SIGTERM) and a requeued job (submitit)
    must equal."""
    return uninterrupted_run(LONG, tmp_path_factory.mktemp("uninterrupted"))


def train_rows_at_least(run_dir, n):
    def ready() -> bool:
        path = run_dir / "metrics.jsonl"
        return path.exists() and path.read_text().count("train/loss") >= n
    return ready


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGUSR1, 138), (signal.SIGHUP, 129)])
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
    assert load(ckpt)["runner"]["train_state"]["steps"]["fine"] == s["fine_steps"]  # a whole step, not half of one


def test_sigterm_then_the_printed_command_resumes_to_the_same_end_as_an_uninterrupted_run(tmp_path, whole):
    run_dir = tmp_path / "run"
    p = start([*LONG, f"hydra.run.dir={run_dir}"], tmp_path)
    wait_until(p, train_rows_at_least(run_dir, 3))
    assert kill(p, signal.SIGTERM) == 143
    line = one_line(stderr_of(p), "resume with:")
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[0] == "mltrain" and "train.resume=true" in command and f"hydra.run.dir={run_dir}" in command
    assert summary(run_dir)["status"] == "interrupted"

    proc = cli_here(command[1:], tmp_path)  # the same arguments, via `python -m mltrain.cli`
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(run_dir)["status"] == "finished"
    # stopped between two rows: the part-filled row's loss sum travelled in the checkpoint
    assert without_time(rows(run_dir)) == without_time(rows(whole))
    a, b = final_state(whole), final_state(run_dir)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_a_diverging_run_through_the_cli_ends_with_one_line_and_status_diverged(tmp_path):
    run_dir = tmp_path / "run"
    proc = cli_here([*SMALL, "optim.lr=1e12", "train.grad_clip=0", "train.max_steps=200", "train.log_interval=1",
                     f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = one_line(proc.stderr, "non-finite training loss at fine step")
    assert "(level 0, fine phase)" in line and "train.on_nonfinite=stop" in line
    assert summary(run_dir)["status"] == "diverged"


def test_a_submitit_job_signalled_as_on_preemption_checkpoints_is_requeued_and_resumes_by_itself(tmp_path, whole):
    """SLURM's part played locally: submitit's local executor runs the job (with its own SIGUSR2 handler,
    as on SLURM) and requeues it as SLURM would; SLURM_RESTART_COUNT is set as in a requeued SLURM job.
    The job is LONG, the SIGTERM test's run: the same uninterrupted run is the reference of both."""
    sweep = tmp_path / "sweep"
    p = start(["-m", "hydra/launcher=submitit_local", *LONG, f"hydra.sweep.dir={sweep}"], tmp_path,
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
