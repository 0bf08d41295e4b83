"""No host sync in the step under data parallel: 2 gloo processes, every method (scripts/syncs.py), the stop
signal agreed every train.stop_check_interval steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
from syncs import METHODS, problems  # noqa: E402

STOP_EVERY = 16


def test_no_host_sync_in_the_step_under_data_parallel(tmp_path):
    out = tmp_path / "syncs.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(SCRIPTS / "syncs.py"), str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert set(results["methods"]) == set(METHODS) and results["problems"] == []
    for name, got in results["methods"].items():
        assert not problems(name, got, STOP_EVERY) and got["steps"] >= 40
        assert got["rows"].get("stop check", 0) >= 1  # agreed, every STOP_EVERY steps
