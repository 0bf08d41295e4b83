"""Helpers for the tests that run the installed console tools from outside the repository (a temporary
folder as the working directory) and judge them as a user would: the exit status, the one error line,
no traceback, and the files outside the run or study left as they were."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

BIN = Path(sys.executable).parent  # the venv's console scripts (mltrain, mltrain-study, ...)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
VICTIM = b"a file outside the study: nobody's to change\n" * 100
SMOKE = ["scale=smoke", "train.progress=false", "device=cpu"]


def tool(name: str, *args: str, cwd: Path, env: Optional[dict] = None, timeout: float = 600,
         before: str = "") -> subprocess.CompletedProcess:
    """`<name> <args>` as the installed console script runs it, in `cwd`. `before`: Python run first in the
    same process (a fault to inject), then the script's own entry point."""
    script = BIN / name
    if before:
        code = f"import runpy, sys\n{before}\nsys.argv = [{str(script)!r}, *sys.argv[1:]]\nrunpy.run_path({str(script)!r}, run_name='__main__')"
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [str(script), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**ENV, **(env or {})},
                          errors="replace")


def smoke_run(root: Path, name: str = "run") -> Path:
    """A finished smoke run in root/<name>, made by the installed mltrain."""
    proc = tool("mltrain", *SMOKE, f"hydra.run.dir={root / name}", cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root / name


def edited_copy(run: Path, dest: Path, name: str, change) -> Path:
    """A copy of the run folder `run` at `dest` whose JSON file `name` went through `change(data)`."""
    import shutil

    shutil.copytree(run, dest)
    data = json.loads((dest / name).read_text())
    change(data)
    (dest / name).write_text(json.dumps(data))
    return dest


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ": error:" in line or ": interrupted:" in line]


def refused(proc: subprocess.CompletedProcess, needle: str, code: int = 2) -> str:
    """The one error line of a refused command (exit `code`, no traceback), which must hold `needle`."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode == code, (proc.returncode, out[-3000:])
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, out[-3000:]
    assert needle in lines[0], lines[0]
    return lines[0]


def victim(tmp: Path) -> Path:
    (tmp / "outside").mkdir(exist_ok=True)
    path = tmp / "outside" / "victim.txt"
    path.write_bytes(VICTIM)
    return path


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()} if path.exists() else {}


def fake_runs(root: Path, labels: tuple[str, str] = ("default", "coarsening=evenodd")) -> Path:
    """Two run folders mltrain-compare can read (a single-level and a multilevel one), under root/runs."""
    for name, kind, label, k in (("a", "single", labels[0], 1.0), ("b", "multilevel", labels[1], 1.3)):
        d = root / "runs" / name
        d.mkdir(parents=True)
        rows = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - k * math.log(i), "level": 0} for i in range(1, 50)]
        rows.append({"step": 49, "flops": 49e9, "val/loss": 5.0 - k * math.log(49)})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "summary.json").write_text(json.dumps({"run_kind": kind, "label": label, "seed": 0, "total_flops": 49e9,
                                                    "status": "finished"}))
    return root / "runs"
