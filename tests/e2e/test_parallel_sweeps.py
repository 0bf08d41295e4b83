"""Sweeps in parallel worker processes: the joblib launcher runs jobs in parallel, each worker takes a GPU
of its own (one sweep shows both), and no worker outlives a killed sweep."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

from helpers import SMOKE, processes_with, sweep_summaries


def test_local_launcher_runs_jobs_in_parallel_workers_each_on_its_own_gpu(tmp_path):
    """The joblib launcher: four jobs, each with its own seed and run dir, in two worker processes at once,
    each worker on a GPU of its own."""
    sweep = tmp_path / "sweep"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "mltrain.cli", "-m", "scale=smoke", "train.progress=false",
                           "hydra/launcher=local", "hydra.launcher.n_jobs=2", "seed=0,1,2,3",
                           f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {}
    for log in sweep.glob("*/*.log"):
        m = re.search(r"sweep job #(\d+) trains on GPU (\d+) \(worker pid (\d+), CUDA_VISIBLE_DEVICES=(\d+)\)",
                      log.read_text())
        assert m, log
        jobs[int(m[1])] = (m[2], m[3], m[4])
    assert sorted(jobs) == [0, 1, 2, 3]
    gpu_of_worker = {}
    for gpu, pid, visible in jobs.values():
        assert gpu == visible and gpu in {"3", "5"}  # CUDA in the job sees its GPU only
        assert gpu_of_worker.setdefault(pid, gpu) == gpu  # a worker keeps its GPU from job to job
    assert len(gpu_of_worker) == 2  # two workers ran jobs at the same time ...
    assert set(gpu_of_worker.values()) == {"3", "5"}  # ... each on its own GPU
    runs = sweep_summaries(sweep)
    assert set(runs) == {f"scale=smoke,seed={seed}" for seed in range(4)}  # a run dir per job
    assert len({run["final_val_loss"] for run in runs.values()}) == 4  # each job trained with its own seed


def test_no_worker_outlives_a_killed_sweep(tmp_path):
    marker = f"mltrain-test-{uuid.uuid4().hex}"
    sweep_dir = tmp_path / "sweep"
    with open(tmp_path / "sweep.err", "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "mltrain.cli", "-m", *SMOKE, "train.max_steps=100000",
                              "hydra/launcher=local", "hydra.launcher.n_jobs=2", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                             env={**os.environ, "MLTRAIN_TEST_MARKER": marker, "OMP_NUM_THREADS": "1"})
        try:
            deadline = time.monotonic() + 120
            while len(list(sweep_dir.glob("*/metrics.jsonl"))) < 2 and time.monotonic() < deadline:
                assert p.poll() is None, (tmp_path / "sweep.err").read_text()[-2000:]
                time.sleep(0.2)
            assert len(processes_with(marker)) >= 3  # the sweep and its two workers
        finally:
            p.kill()
            p.wait()
    deadline = time.monotonic() + 60
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_with(marker)
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left
    assert "stopped by SIGTERM" in (tmp_path / "sweep.err").read_text()  # each run wrote its checkpoint first
