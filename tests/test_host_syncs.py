"""No host stall in the step: over steady-state steps of every method, single process and 2 gloo processes,
mltrain's own code converts no tensor to a host value in the step itself, at most one per row it writes
(a train row, an evaluation, a diagnostics row), and under data parallel the stop signal is agreed every
train.stop_check_interval steps, not every step (tests/host_syncs.py counts)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from host_syncs import METHODS, count

STOP_EVERY = 16


def assert_bounded(name: str, got: dict) -> None:
    conversions, rows = got["conversions"], got["rows"]
    assert got["finished"] and got["steps"] >= 40, name
    assert conversions.get("step", 0) == 0, (name, conversions)
    for where in ("train row", "eval row", "diag row"):
        assert conversions.get(where, 0) <= rows.get(where, 0), (name, where, conversions, rows)
    assert rows.get("train row", 0) < got["steps"] / 4, (name, rows)  # rows, not steps
    checks = rows.get("stop check", 0)
    assert checks <= math.ceil(got["steps"] / STOP_EVERY) + 1, (name, checks)
    assert conversions.get("stop check", 0) <= 2 * checks, (name, conversions)


@pytest.mark.parametrize("name", list(METHODS))
def test_no_host_sync_in_the_step_and_at_most_one_per_row(name):
    got = count(METHODS[name])
    assert_bounded(name, got)
    assert got["rows"].get("stop check", 0) == 0  # one process: the signal is a Python flag


@pytest.mark.slow
def test_no_host_sync_in_the_step_under_data_parallel(tmp_path):
    out = tmp_path / "syncs.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(Path(__file__).parent / "host_syncs.py"), str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert set(results) == set(METHODS)
    for name, got in results.items():
        assert_bounded(name, got)
        assert got["rows"].get("stop check", 0) >= 1  # agreed, every STOP_EVERY steps
