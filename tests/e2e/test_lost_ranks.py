"""Two torchrun ranks when something goes wrong: a batch they cannot split is said once, and a rank killed
mid run stops the other with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from helpers import SMOKE, free_port, one_error, processes_with


def _ranks(tmp_path: Path, marker: str, *args: str) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for r in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(r), "LOCAL_RANK": str(r),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "MLTRAIN_TEST_MARKER": marker}
        procs.append(subprocess.Popen([sys.executable, "-m", "mltrain.cli", *SMOKE, "device=cpu", *args,
                                       f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"rank{r}.err", "w")))
    return procs


def _stderr_of_ranks(tmp_path: Path, procs: list, timeout: float = 120) -> list[str]:
    try:
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(tmp_path / f"rank{r}.err").read_text() for r in range(len(procs))]


def test_a_batch_the_ranks_cannot_split_is_said_once(tmp_path):
    marker = uuid.uuid4().hex
    procs = _ranks(tmp_path, marker, "train.batch_size=3")
    err = "".join(_stderr_of_ranks(tmp_path, procs))
    assert [p.returncode for p in procs] == [2, 2]
    one_error(subprocess.CompletedProcess([], 2, "", err))
    assert "divisible by the number of processes (2)" in err and not processes_with(marker)


def test_a_rank_killed_mid_run_stops_the_other_with_one_line(tmp_path):
    marker = uuid.uuid4().hex
    procs = _ranks(tmp_path, marker, "train.max_steps=100000", "train.eval_interval=1000")
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while (not metrics.exists() or metrics.read_bytes().count(b"\n") < 3) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), (tmp_path / "rank0.err").read_text()[-2000:]
        time.sleep(0.2)
    procs[1].kill()
    err0, _ = _stderr_of_ranks(tmp_path, procs, timeout=60)
    line = one_error(subprocess.CompletedProcess([], procs[0].returncode, "", err0))
    assert "rank 0 of 2 lost contact with the other ranks" in line and "train.resume=true" in line
    assert not processes_with(marker)
