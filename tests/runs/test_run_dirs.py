"""A run dir belongs to one run: one in use by a live run or sweep is refused and left untouched, an
unwritable one is one line, default dirs are claimed anew in every process, a lock left by a killed run
does not block, a sweep rerun over killed jobs leaves their Hydra files alone."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest
from helpers import SMOKE, file_tree, make_earlier_run, one_error, run_tool_here, unwritable_dir

from mltrain.core.errors import ConfigError
from mltrain.runs import rundir


def test_a_run_dir_in_use_by_a_live_run_is_refused_and_untouched(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "cli.log").write_text("the live run's log\n")  # it has not written a metrics row yet
    with open(run_dir / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # what a live run holds for its whole life
        before = file_tree(run_dir)
        proc = run_tool_here("mltrain", *SMOKE, f"hydra.run.dir={run_dir}", cwd=tmp_path)
        line = one_error(proc)
    assert "is in use by another mltrain run" in line and str(run_dir) in line
    assert file_tree(run_dir) == before


def test_unique_dir_claims_a_new_name_in_every_process(tmp_path):
    # each process starts a run in the folder it got (an empty one is removed when its process ends)
    code = "from mltrain.runs.rundir import unique_dir; d = unique_dir('out/12-00-00'); open(d + '/run', 'w'); print(d)"
    names = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout.strip() for _ in range(3)]
    assert names == ["out/12-00-00", "out/12-00-00-1", "out/12-00-00-2"]
    assert rundir.unique_dir(str(tmp_path / "x")) == rundir.unique_dir(str(tmp_path / "x"))  # stable in a process


def test_rerunning_a_sweep_over_killed_jobs_leaves_their_hydra_files_alone(tmp_path):
    sweep = tmp_path / "sweep"
    make_earlier_run(sweep / "scale=smoke,seed=0")  # killed: .hydra/, log, rows, no summary.json
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    before = file_tree(sweep)
    proc = run_tool_here("mltrain", "-m", *SMOKE, "seed=0,1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    line = one_error(proc)
    assert "holds earlier runs" in line
    assert file_tree(sweep) == before


def test_a_sweep_dir_in_use_by_a_live_sweep_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    with open(sweep / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = run_tool_here("mltrain", "-m", *SMOKE, "seed=0", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
        line = one_error(proc)
    assert "hydra.sweep.dir" in line and "in use" in line
    assert [p.name for p in sweep.iterdir()] == [rundir.LOCK_FILE]


def test_in_process_runs_hold_the_lock_and_give_it_back(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="in use by another mltrain run"):
            rundir.claim(run_dir)
    with rundir.claim(run_dir):
        assert rundir.holds(run_dir)
        with rundir.claim(run_dir):  # nested claims (RunGuard, then run()) in one process
            pass
        assert rundir.holds(run_dir)
        other = open(run_dir / rundir.LOCK_FILE, "a")
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.close()
    assert not rundir.holds(run_dir)


def test_a_lock_file_left_by_a_killed_run_does_not_block(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rundir.LOCK_FILE).write_text("999999\n")  # killed before its first row: the kernel dropped the lock
    with rundir.claim(run_dir):
        assert (run_dir / rundir.LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_an_unwritable_run_dir_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    line = one_error(run_tool_here("mltrain", *SMOKE, f"hydra.run.dir={blocker}/run", cwd=tmp_path))
    assert f"cannot create hydra.run.dir={blocker}/run" in line
    assert blocker.read_text() == "not a folder\n"
    ro = unwritable_dir(tmp_path)
    line = one_error(run_tool_here("mltrain", *SMOKE, f"hydra.run.dir={ro}/run", cwd=tmp_path))
    assert f"cannot create hydra.run.dir={ro}/run" in line
