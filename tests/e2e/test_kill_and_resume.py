"""Through the CLI, as a user would: killed in a coarse phase and in the fine tail, then resumed, equals an
uninterrupted run; a resume refuses another config and leaves a finished run alone; a sweep resumes its
unfinished jobs, starts the rest and skips the finished ones."""

import signal

from helpers import (SMALL, assert_same_weights, checkpoints, cli_here, final_state, kill, name_position, one_line,
                     plan_position, rows, snapshot, start, stderr_of, summary, uninterrupted_run, wait_until,
                     without_time, compose_config)

from helpers import typed
from mltrain.run import build
from mltrain.training.checkpoint import save_checkpoint


PLAN = ["train.max_steps=12", "train.eval_interval=6", "train.eval_tokens=64", "multilevel.n_cycles=3",
        "multilevel.coarse_steps=5"]


def session(*overrides):
    rows = []
    return build(typed(compose_config(*PLAN, *overrides)), rows.append), rows


# Two cycles with long coarse phases (2 x 150 steps each), a 198-step fine tail, a checkpoint every 5
# fine steps (inside coarse phases: every 5 fine steps' worth of FLOPs).
KILLABLE = [*SMALL, "coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=150",
            "multilevel.coarse_log_interval=10", "train.max_steps=200", "train.log_interval=5",
            "train.eval_interval=50", "train.checkpoint_interval=5", "train.keep_checkpoints=3"]


def test_killed_in_a_coarse_phase_and_in_the_fine_tail_then_resumed_equals_an_uninterrupted_run(tmp_path):
    whole = uninterrupted_run(KILLABLE, tmp_path)

    run_dir = tmp_path / "killed"
    args = [*KILLABLE, f"hydra.run.dir={run_dir}"]
    # SIGKILL once a checkpoint inside cycle 0's coarse phases exists (after fine step 1 and coarse steps)
    p = start(args, tmp_path)
    wait_until(p, lambda: any(name_position(c)[0] == 1 and name_position(c)[1] > 1 for c in checkpoints(run_dir)))
    assert kill(p) == -signal.SIGKILL
    phase, step = plan_position(checkpoints(run_dir)[-1])
    assert phase.startswith("train coarse") and step > 0, (phase, step)  # the resume starts mid coarse phase

    # resume; SIGKILL again inside the fine-only tail
    p = start([*args, "train.resume=true"], tmp_path)
    wait_until(p, lambda: any(name_position(c)[0] >= 40 for c in checkpoints(run_dir)))
    assert kill(p) == -signal.SIGKILL
    phase, step = plan_position(checkpoints(run_dir)[-1])
    assert phase == "train fine x198" and 0 < step < 198, (phase, step)
    assert "resuming" in stderr_of(p)

    proc = cli_here([*args, "train.resume=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_weights(final_state(whole), final_state(run_dir))  # bit-identical
    assert without_time(rows(run_dir)) == without_time(rows(whole))  # no row duplicated or missing
    # the summaries differ only in time, in the command line that produced them and in the machine's load
    where = ("provenance", "environment")
    same = lambda s: {k: v for k, v in without_time([s])[0].items() if k not in where}  # noqa: E731
    assert {k: v for k, v in summary(run_dir)["environment"].items() if not k.startswith("load")} == {
        k: v for k, v in summary(whole)["environment"].items() if not k.startswith("load")}
    assert same(summary(run_dir)) == same(summary(whole))
    assert summary(run_dir)["status"] == "finished"
    assert len(checkpoints(run_dir)) == 3 and not list((run_dir / "checkpoints").glob(".*"))


def test_resume_refuses_another_config_leaves_a_finished_run_alone_and_changes_nothing_first(tmp_path):
    run_dir = tmp_path / "run"
    args = [*SMALL, "coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=20",
            "train.max_steps=300", "train.checkpoint_interval=10", f"hydra.run.dir={run_dir}"]
    p = start(args, tmp_path)
    wait_until(p, lambda: any(name_position(c)[0] >= 20 for c in checkpoints(run_dir)))
    kill(p)
    before = snapshot(run_dir)

    proc = cli_here([*args, "seed=1", "multilevel.delta=0.5", "train.resume=true"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = one_line(proc.stderr, "another config")
    assert "multilevel.delta (0.25 there, 0.5 here)" in line and "seed (0 there, 1 here)" in line
    assert snapshot(run_dir) == before  # .hydra/, metrics, checkpoints: not a byte, not a timestamp

    # a checkpoint made by another model, newest in the folder: refused by name, nothing changed (but
    # the log lines of the attempt: the data is loaded before the checkpoint can be checked)
    other, _ = session("coarsening=evenodd")
    save_checkpoint(run_dir / "checkpoints" / "step-999999-99999999.pt", other.runner)
    before = snapshot(run_dir)
    proc = cli_here([*args, "train.resume=true"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    one_line(proc.stderr, "step-999999-99999999.pt is from another model (model.n_layer=4 there, 2 here)")
    logs = lambda snap: {k: v for k, v in snap.items() if not k.endswith(".log")}  # noqa: E731
    assert logs(snapshot(run_dir)) == logs(before)
    (run_dir / "checkpoints" / "step-999999-99999999.pt").unlink()

    # bookkeeping keys may differ: the run continues to its end
    proc = cli_here([*args, "train.resume=true", "train.checkpoint_interval=50", "logger.mode=disabled"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(run_dir)["status"] == "finished" and summary(run_dir)["fine_steps"] == 300
    steps = [r["step"] for r in rows(run_dir) if r.get("phase") == "fine" and r["step"] > 2]
    assert steps == list(range(10, 301, 10))  # every row once
    assert (run_dir / ".hydra" / "overrides.yaml").read_bytes() == before[".hydra/overrides.yaml"][0]

    # a finished run: one line, status 0, untouched
    before = snapshot(run_dir)
    proc = cli_here([*args, "train.resume=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_line(proc.stderr, "holds a finished run (300 fine steps): nothing to resume, left untouched")
    assert snapshot(run_dir) == before


def test_a_sweep_resumes_its_unfinished_job_starts_the_rest_and_skips_the_finished_untouched(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *SMALL, "train.max_steps=400", "train.checkpoint_interval=20", "seed=0,1,2",
            f"hydra.sweep.dir={sweep}"]
    p = start(args, tmp_path)
    job = lambda seed: next(sweep.glob(f"*,seed={seed},*"))  # noqa: E731

    def job1_has_a_checkpoint() -> bool:
        try:
            return bool(checkpoints(job(1)))
        except StopIteration:
            return False

    wait_until(p, job1_has_a_checkpoint)
    kill(p)
    assert summary(job(0))["status"] == "finished" and not list(sweep.glob("*,seed=2,*"))
    done = snapshot(job(0))
    hydra_1 = snapshot(job(1) / ".hydra")

    proc = cli_here([*args, "train.resume=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_line(proc.stderr, f"{job(0)} holds a finished run (400 fine steps): nothing to resume, left untouched")
    assert snapshot(job(0)) == done  # not a byte, not a timestamp
    assert snapshot(job(1) / ".hydra") == hydra_1  # the record of how job 1 was made is kept
    for seed in (1, 2):
        assert summary(job(seed))["status"] == "finished"
        steps = [r["step"] for r in rows(job(seed)) if "train/loss" in r]
        assert steps == list(range(10, 401, 10))  # no row twice, none missing

    # all finished: a second resume changes nothing at all
    everything = snapshot(sweep)
    proc = cli_here([*args, "train.resume=true"], tmp_path)
    assert proc.returncode == 0 and proc.stderr.count("left untouched") == 3
    after = snapshot(sweep)
    assert {k: v for k, v in after.items() if k != "multirun.yaml"} == {
        k: v for k, v in everything.items() if k != "multirun.yaml"}
