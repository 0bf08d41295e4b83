"""scripts/gpu_check.sh: --dry-run runs the GPU check's whole pipeline, tiny, on the CPU, ending in one JSON
with every part; without it, on a CPU torch, it says in one line that there is no CUDA device and exits 1
(it cannot print "ok" without a GPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PARTS = {"device", "cuda_tests", "syncs", "bench", "paper", "smoke"}


def test_gpu_check_dry_run_runs_every_part_and_prints_one_json(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout is the summary and nothing else
    assert out["ok"] and out["mode"].startswith("dry-run") and out["problems"] == []
    assert set(out["parts"]) == PARTS and all(p["rc"] == 0 and not p["timed_out"] for p in out["parts"].values())
    assert all(0 < p["limit_s"] for p in out["parts"].values())
    assert out["device"]["torch"] == torch.__version__
    tests = out["cuda_tests"]
    assert tests["failed"] == 0 and tests["passed"] + tests["skipped"] >= 5
    if not torch.cuda.is_available():
        assert tests["passed"] == 0  # collected and skipped: allowed in a dry run only
    assert out["syncs"]["problems"] == [] and len(out["syncs"]["methods"]) >= 4
    assert all(m["conversions"].get("step", 0) == 0 for m in out["syncs"]["methods"].values())
    assert out["bench"]["compile"]["recompiles_after_warmup"] == 0 and out["bench"]["fine_single"]["ms_per_step"] > 0
    paper = out["paper"]
    for name in ("multilevel", "single"):
        run = paper[name]
        assert run["status"] == "finished" and run["compiled"] and len(run["val_curve"]) >= 3 and run["train_rows"]
    assert abs(paper["flop_saving"]) < 0.1  # the single-level run has as many FLOPs
    assert paper["multilevel"]["coarse_steps"] > 0 and -1 < paper["wall_clock_saving"] < 1
    assert out["smoke"]["status"] == "finished" and out["smoke"]["world_size"] == 2 and out["smoke"]["compiled"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the check for real")
def test_gpu_check_without_a_gpu_says_so_in_one_line_and_fails(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0], proc.stderr
