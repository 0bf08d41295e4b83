"""scripts/gpu_check.sh --dry-run: the GPU check's pipeline, tiny, on the CPU, ending in one JSON summary."""

import json
import os
import subprocess
import sys

import torch
from helpers import REPO


def test_gpu_check_dry_run_prints_one_json_summary(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout is the summary and nothing else
    assert out["ok"] and out["mode"].startswith("dry-run") and all(out["parts_ok"].values())
    tests = out["cuda_tests"]
    assert tests["failed"] == 0 and tests["passed"] + tests["skipped"] >= 5
    if not torch.cuda.is_available():
        assert tests["passed"] == 0  # collected and skipped: the step ran
    for name, bench in out["bench"].items():
        assert bench["steps"]["fine_single"]["tokens_per_s"] > 0 and bench["ratios"]["fine_single_vs_plain"] > 0
        assert 0 < bench["runs"]["flop_saving"] < 1
    compiled = out["bench"]["compile_on"]
    assert compiled["config"]["compile"] and compiled["compile"]["recompiles_after_warmup"] == 0
    assert out["run"]["fine_steps"] == 6 and out["run"]["final_val_loss"] < out["run"]["initial_val_loss"]
