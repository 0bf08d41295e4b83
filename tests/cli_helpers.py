"""Helpers for the checkpoint / resume / signal tests: CLI runs in subprocesses, file snapshots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from mltrain.runs.files import METRICS, read_metrics
from mltrain.runs.rundir import LOCK_FILE

# A smoke-sized multilevel run, spelt out (not a preset) so that preset changes do not move it.
SMALL = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
         "train.eval_batches=1", "schedule.warmup_steps=1", "train.progress=false", "device=cpu"]
TIME_COLUMNS = {"time_s", "train_time_s", "tokens_per_s", "mfu", "wall_time_s"}
# One intra-op thread: these models are tiny, and on a shared 2-core machine a second spinning thread per
# process slows a step tenfold. (Exactness needs only the same setting in the runs compared.)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def cli(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mltrain.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def start(args: list[str], cwd: Path, env: Optional[dict] = None) -> subprocess.Popen:
    """A CLI run in the background; its stderr goes to cwd/stderr-<n>.txt (no pipe to fill up)."""
    n = len(list(cwd.glob("stderr-*.txt")))
    err = open(cwd / f"stderr-{n}.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mltrain.cli", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=err, env={**ENV, **(env or {})})
    proc.stderr_path = cwd / f"stderr-{n}.txt"  # type: ignore[attr-defined]
    return proc


def wait_until(proc: subprocess.Popen, condition: Callable[[], bool], timeout: float = 300) -> None:
    """Poll `condition` every few ms while `proc` runs; fail if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (status {proc.returncode}) first:\n{stderr_of(proc)[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting")
        time.sleep(0.003)


def stderr_of(proc: subprocess.Popen) -> str:
    return Path(proc.stderr_path).read_text()  # type: ignore[attr-defined]


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 300) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=timeout)


def checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files, oldest first (by the optimizer-step count in their names)."""
    found = [(int(p.stem.split("-")[2]), p) for p in (run_dir / "checkpoints").glob("step-*.pt")]
    return [p for _, p in sorted(found)]


def name_position(path: Path) -> tuple[int, int]:
    """(fine steps, optimizer steps) from a checkpoint's file name."""
    _, fine, total = path.stem.split("-")
    return int(fine), int(total)


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def plan_position(path: Path) -> tuple[str, int]:
    """(the plan phase a checkpoint stands in, step within it)."""
    payload = load(path)
    st = payload["runner"]["train_state"]
    return payload["identity"]["plan"][st["phase_index"]], st["step_in_phase"]


def rows(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / METRICS, strict=True)


def without_time(items: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in items]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def uninterrupted_run(args: list[str], tmp_path: Path) -> Path:
    """`mltrain args` run to the end in tmp_path/whole, the reference a stopped-and-resumed run must equal."""
    whole = tmp_path / "whole"
    proc = cli([*args, f"hydra.run.dir={whole}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return whole


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and modification time. Not the run-dir lock (rundir.LOCK_FILE):
    each run that claims the dir, a resume too, writes its own pid there."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def final_state(run_dir: Path) -> dict:
    return load(checkpoints(run_dir)[-1])["runner"]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def one_line(text: str, needle: str) -> Optional[str]:
    """The one line of `text` containing `needle` (fails if there are several)."""
    lines = [line for line in text.splitlines() if needle in line]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def processes_running(*words: str) -> list[int]:
    """Ids of this machine's processes whose command line holds all `words` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit() and all(w in cmdline for w in words):
            found.append(int(proc.name))
    return found
