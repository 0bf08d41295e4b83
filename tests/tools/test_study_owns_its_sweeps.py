"""A study owns its sweeps' process (mltrain/tools/study/launch.py): it dies with the study however the
study ends (`kill -9` included), a SIGTERM to the study while that process is still starting stops the
study instead of counting failed runs, the study's folder stays locked while any of it lives (the
documented resume is refused beside it), and a threads backend, where a stop cannot reach a run, is refused.

The "study" here is a small Python process doing what stages.run does around a stage: claim the folder,
then `launch.multirun` one sweep of a smoke run long enough to be interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import run_main

from mltrain.core.errors import ConfigError
from mltrain.runs import rundir
from mltrain.tools.study import launch

STUDY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from mltrain.runs import rundir
    from mltrain.tools.study.launch import multirun
    root = Path(sys.argv[1])
    with rundir.claim(root, what="dir", earlier=lambda _: None):
        code = multirun([json.loads(sys.argv[2])], {"OMP_NUM_THREADS": "1"})
    print(json.dumps({"code": code}), flush=True)
""")
LONG_SWEEP = ["scale=smoke", "device=cpu", "train.progress=false", "train.max_steps=100000", "train.eval_interval=1000",
              "train.checkpoint_interval=0", "seed=0,1"]


def start_study(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    root = tmp_path / "study"
    sweep = [*LONG_SWEEP, f"hydra.sweep.dir={root / 'sweep'}"]
    proc = subprocess.Popen([sys.executable, "-c", STUDY, str(root), json.dumps(sweep)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, root


def sweep_pid(root: Path, study: subprocess.Popen, timeout: float = 60) -> int:
    """The sweeps' process, named after the study in the folder's lock file once it has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(t) for t in (root / rundir.LOCK_FILE).read_text().split()] if (root / rundir.LOCK_FILE).exists() else []
        if len(pids) == 2 and pids[0] == study.pid:
            return pids[1]
        time.sleep(0.05)
    raise AssertionError("the sweeps' process never started")


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def training(root: Path) -> bool:
    return any(p.stat().st_size > 0 for p in (root / "sweep").glob("*/metrics.jsonl"))


def test_kill_9_of_the_study_takes_its_sweep_down_and_the_resume_waits_for_it(tmp_path):
    study, root = start_study(tmp_path)
    try:
        pid = sweep_pid(root, study)
        wait_for(lambda: training(root), 120, "the sweep's first run never trained")
        study.kill()  # SIGKILL: no handler of the study runs
        study.wait(timeout=10)
        # the sweep still lives for its step and checkpoint: the folder is its, and the resume is refused
        try:
            with rundir.claim(root, what="dir", earlier=lambda _: None):
                held = False
        except ConfigError as err:
            held = True
            assert f"is in use by another mltrain run (process {pid})" in str(err), str(err)
        assert held or not group_alive(pid)  # refused, unless the sweep had already stopped
        wait_for(lambda: not group_alive(pid), launch.GRACE_S + 30, "the sweep outlived the study")
        # it stopped as a signal stops a run: after a step, with a checkpoint; the second job never started
        summaries = [json.loads(p.read_text()) for p in (root / "sweep").glob("*/summary.json")]
        assert [s["status"] for s in summaries] == ["interrupted"], summaries
        assert list((root / "sweep").glob("*/checkpoints/*.pt"))
        with rundir.claim(root, what="dir", earlier=lambda _: None):
            pass  # free now: the same command may resume
    finally:
        study.kill()


def test_sigterm_to_the_study_while_its_sweep_starts_stops_the_study(tmp_path):
    """SIGTERM before the sweeps' process has mltrain's handlers kills that process: the study's status is
    the stop (143), not failed runs to go on from."""
    study, root = start_study(tmp_path)
    try:
        sweep_pid(root, study)
        study.send_signal(signal.SIGTERM)  # the sweeps' process is still importing torch and Hydra
        out, _ = study.communicate(timeout=120)
        assert json.loads(out.strip().splitlines()[-1]) == {"code": 128 + signal.SIGTERM}, out
        assert not list((root / "sweep").glob("*/summary.json"))
    finally:
        study.kill()


def test_a_sweep_process_whose_study_is_already_gone_stops_at_once(tmp_path):
    env = {**os.environ, launch.STUDY_PID_ENV: "1"}  # not its parent: the study died before it started
    sweep = [*LONG_SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run([sys.executable, "-c", launch.ENTRY, json.dumps(sweep)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, process_group=0)
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("setting", ["hydra.launcher.backend=threading", "hydra.launcher.prefer=threads",
                                     "hydra.launcher.require=sharedmem"])
def test_a_threads_backend_is_refused_in_one_line(tmp_path, setting, capsys):
    code, _, err = run_main("study=smoke", f"dir={tmp_path / 'study'}", "launcher.name=local", "launcher.n_jobs=1",
                            f"launcher.overrides=['{setting}']", capsys=capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"{setting} runs every job in a thread of one process" in lines[0], err
    assert not (tmp_path / "study").exists()
    proc = subprocess.run([sys.executable, "-m", "mltrain.cli", "-m", "scale=smoke", "device=cpu", "hydra/launcher=local",
                           "hydra.launcher.n_jobs=1", setting, "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"mltrain: error: {setting} runs"), proc.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("status", [130, 143, 129])
def test_a_stage_stopped_by_a_signal_stops_the_study_with_that_status(tmp_path, monkeypatch, status):
    import io

    from mltrain.tools.study import compose, stages
    from mltrain.tools.study.cli import compose_study

    study = stages.prepare(compose.typed_study(compose_study(["study=smoke", f"dir={tmp_path / 'study'}", "~ladder.d32"])))
    launched = []
    monkeypatch.setattr(stages, "multirun", lambda sweeps, env: launched.append(sweeps) or status)
    out = io.StringIO()
    study.out = out
    assert stages.run(study, "mltrain-study study=smoke") == status
    assert len(launched) == 1  # the first stage's sweeps, and nothing after them
    assert out.getvalue().splitlines()[-1].startswith("mltrain-study: stopped; every finished run is kept")
