"""Hydra multirun through the real CLI: the basic launcher and the joblib one, and the job dir names."""

import shutil
import subprocess
import sys

import pytest

from helpers import SMOKE, multirun_here, run_tool_here, sweep_summaries


JOBS = {f"coarsening=evenodd,multilevel.delta={d},scale=smoke,seed={s}" for d in (0.1, 0.5) for s in (0, 1)}


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """A finished sweep of 4 jobs over seed and delta (JOBS), made once for this file."""
    return multirun_here(tmp_path_factory.mktemp("seed_and_delta"), "seed=0,1", "multilevel.delta=0.1,0.5",
                         "coarsening=evenodd")


def test_sweep_over_seed_and_delta_names_each_job_dir_after_its_overrides(finished_sweep):
    runs = sweep_summaries(finished_sweep)
    assert set(runs) == JOBS
    for name, s in runs.items():
        assert s["run_kind"] == "multilevel" and f"seed={s['seed']}" in name and f"delta={s['delta']}" in name
        # seeds of one configuration share a label (the W&B group); deltas do not
        assert s["label"] == f"coarsening=evenodd,multilevel.delta={s['delta']},scale=smoke"


def test_refuses_a_sweep_dir_that_holds_runs(tmp_path, finished_sweep):
    sweep = tmp_path / "sweep"
    shutil.copytree(finished_sweep, sweep)  # the other test's sweep, finished: a copy of it
    proc = run_tool_here("mltrain", "-m", *SMOKE, "seed=1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 2 and "holds earlier runs" in proc.stderr
    assert set(sweep_summaries(sweep)) == JOBS


def test_long_override_lists_get_a_short_unique_job_dir():
    from mltrain.runs.names import MAX_DIRNAME, short_dirname

    long_a = ",".join(f"model.key{i}=value{i}" for i in range(40)) + ",seed=0"
    long_b = long_a[:-1] + "1"
    assert len(short_dirname(long_a)) == MAX_DIRNAME and short_dirname(long_a) != short_dirname(long_b)
    assert short_dirname("seed=1") == "seed=1"


def test_a_job_dir_name_is_one_path_component_whatever_the_values():
    from mltrain.runs.names import short_dirname

    for name in ("data.path=x/../../../escape.txt,seed=1", "data.path=/etc,seed=1", "data.path=../..", "a=%2F/"):
        got = short_dirname(name)
        assert "/" not in got and got not in (".", "..") and got.startswith(name.split("=")[0]), got
    assert short_dirname("data.path=a/b") != short_dirname("data.path=a%2Fb")  # '%' is encoded too: no collision


def test_sweep_values_that_are_paths_never_put_job_dirs_outside_the_sweep_dir(tmp_path):
    """`data.path=x/../../../escape.txt` was path components of the job's folder: one level above the sweep
    dir's parent. Each job's folder is now one name directly inside hydra.sweep.dir."""
    corpus = tmp_path / "escape.txt"
    corpus.write_text("hello world " * 3000)
    work = tmp_path / "a" / "b"
    (work / "x").mkdir(parents=True)
    sweep = work / "sweep"
    before = {p for p in tmp_path.rglob("*")}
    proc = run_tool_here("mltrain", "-m", *SMOKE, "data=text", f"data.path=x/../../../escape.txt,{corpus}",
                         "hydra.sweep.dir=sweep", cwd=work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = {p for p in tmp_path.rglob("*")} - before
    assert made and all(p == sweep or sweep in p.parents for p in made), sorted(map(str, made - {sweep}))
    jobs = sorted(p.parent for p in sweep.rglob("summary.json"))
    assert len(jobs) == 2 and all(job.parent == sweep for job in jobs), jobs


def test_a_failing_job_is_reported_once_and_the_sweep_goes_on(tmp_path):
    # a context longer than the data: found when the job loads its data, not by checking the config
    sweep = tmp_path / "sweep"
    proc = run_tool_here("mltrain", "-m", *SMOKE, "model.block_size=100000000,16", f"hydra.sweep.dir={sweep}",
                         cwd=tmp_path)
    assert proc.returncode == 1
    out = proc.stderr + proc.stdout
    assert "failed: the train split has" in out and "fewer than block_size + 1 = 100000001" in out
    assert "Traceback" not in out and "Error executing job" not in out  # said once, when it failed
    assert set(sweep_summaries(sweep)) == {"model.block_size=16,scale=smoke"}


def test_a_bad_value_of_a_later_sweep_point_stops_the_sweep_before_its_first_job(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_tool_here("mltrain", "-m", *SMOKE, "coarsening=evenodd", "multilevel.delta=0.5,2.0",
                         f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mltrain: error: sweep point #1 (multilevel.delta=2.0): multilevel.delta=2.0 must be in [0, 1]; "
        "no job was started"]
    assert not sweep.exists()


SWEEPS_IN_ONE_PROCESS = """
import json, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
composed = []
real = ConfigLoaderImpl.load_sweep_config
def counting(self, master_config, sweep_overrides):
    composed.append(list(sweep_overrides))
    return real(self, master_config, sweep_overrides)
ConfigLoaderImpl.load_sweep_config = counting
import atexit
atexit.register(lambda: print("COMPOSED", json.dumps(composed), file=sys.stderr, flush=True))
from mltrain.console import sweeps_main
sweeps_main([json.loads(a) for a in sys.argv[1:]])
"""


def test_sweeps_in_one_process_run_in_turn_each_job_composed_once_and_a_refused_one_fails_alone(tmp_path):
    """mltrain-study's form (console.sweeps_main): a sweep refused before its first job does not stop
    the next one; the process ends with status 1; each job's config is composed once (the sweep's
    check), not three times (Hydra's batch check and its launcher take that composition)."""
    import json

    from mltrain.tools.study.launch import ENTRY

    assert "sweeps_main" in ENTRY
    refused = [*SMOKE, "seed=5", "model.n_layer=0", f"hydra.sweep.dir={tmp_path / 'refused'}"]
    good = [*SMOKE, "seed=0,1,2", f"hydra.sweep.dir={tmp_path / 'good'}"]
    proc = subprocess.run([sys.executable, "-c", SWEEPS_IN_ONE_PROCESS, json.dumps(refused), json.dumps(good)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert [line for line in proc.stdout.splitlines() if line.startswith("$ mltrain -m ")] == [
        f"$ mltrain -m {' '.join(refused)}", f"$ mltrain -m {' '.join(good)}"]
    assert "model.n_layer" in proc.stderr and not (tmp_path / "refused").exists()
    assert set(sweep_summaries(tmp_path / "good")) == {f"scale=smoke,seed={s}" for s in (0, 1, 2)}
    composed = json.loads(proc.stderr.split("COMPOSED ", 1)[1].splitlines()[0])
    seeds = sorted(next(o for o in overrides if o.startswith("seed=")) for overrides in composed)
    assert seeds == ["seed=0", "seed=1", "seed=2", "seed=5"]  # one composition a job


def test_a_stopped_sweep_ends_the_process_with_its_status_and_the_later_ones_do_not_start(monkeypatch, capsys):
    from mltrain import console

    ran, statuses = [], iter([0, 2, 143, 0])

    def train_main():
        ran.append(sys.argv[2:])
        raise SystemExit(next(statuses))

    monkeypatch.setattr(console, "train_main", train_main)
    with pytest.raises(SystemExit) as end:
        console.sweeps_main([["seed=0"], ["seed=1"], ["seed=2"], ["seed=3"]])
    assert end.value.code == 143 and ran == [["seed=0"], ["seed=1"], ["seed=2"]]
    statuses = iter([0, 2, 0])
    with pytest.raises(SystemExit) as end:
        console.sweeps_main([["seed=0"], ["seed=1"], ["seed=2"]])
    assert end.value.code == 1
