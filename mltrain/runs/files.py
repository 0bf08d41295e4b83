"""The files of a run directory and how they are read: the contract between a run and the tools that
read it (mltrain-compare, mltrain-study). Imports neither torch nor wandb, so a reader starts fast.

    run.json       what the run is, written (atomically) when its tracker opens, before its first row:
                   RUN_RECORD_FIELDS. A run that never finishes still says what it was.
    metrics.jsonl  one JSON object per row (train, eval, diagnostics), appended (runs/tracking.py)
    summary.json   written once at the end, atomically; its `status` is finished, interrupted or
                   diverged, and it repeats the run.json fields

A reader takes what a run is from summary.json, else from run.json (`read_run_record`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from mltrain.core import atomic

log = logging.getLogger("mltrain.runs.files")

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
RUN_RECORD = "run.json"
# What run.json holds: the run kind (method/kinds.py RunKind), the configuration label shared by its
# seeds, the seed, the fraction of train.max_steps it trains (train.budget) and those fine steps, the
# method preset's name, and the digest of what it computes (runs/keys.py config_digest).
RUN_RECORD_FIELDS = ("run_kind", "label", "seed", "budget", "budget_steps", "preset", "config_digest")


def json_default(obj: Any) -> Any:
    """numpy / torch scalars and 0-d tensors -> Python numbers; anything else -> str."""
    if hasattr(obj, "item"):
        try:
            return obj.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """JSON through a temp file next to `path` and os.replace: never a half-written file."""
    atomic.write_json(path, data, indent=2, default=json_default)


def read_metrics(path: str | os.PathLike, strict: bool = False) -> list[dict]:
    """All rows of a metrics.jsonl, in file order. Blank and unparseable lines (a partial last line left
    by a crash) are skipped with one warning; with `strict`, the first line that is not one whole JSON
    object raises ValueError naming it (every line a whole row: what the run-file contract promises)."""
    rows, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            try:
                row = json.loads(line) if line else None
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict):
                rows.append(row)
                continue
            if strict:
                raise ValueError(f"{path}: line {number} is not a whole row: {line[:80]!r}")
            bad += int(bool(line))
    if bad:
        log.warning("%s: skipped %d unreadable line(s)", path, bad)
    return rows


def read_json_object(path: str | os.PathLike) -> Optional[dict]:
    """The JSON object in `path`, or None when there is no such file. OSError or ValueError when it
    cannot be read or holds something else."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def read_summary(run_dir: str | os.PathLike) -> Optional[dict]:
    return read_json_object(Path(run_dir) / SUMMARY)


def read_run_record(run_dir: str | os.PathLike) -> Optional[dict]:
    return read_json_object(Path(run_dir) / RUN_RECORD)


def write_run_record(run_dir: str | os.PathLike, record: dict) -> None:
    """run.json: the RUN_RECORD_FIELDS of `record` (a missing field is refused: the contract is whole)."""
    missing = [k for k in RUN_RECORD_FIELDS if k not in record]
    if missing:
        raise ValueError(f"run.json needs {', '.join(missing)}")
    write_json_atomic(Path(run_dir) / RUN_RECORD, {k: record[k] for k in RUN_RECORD_FIELDS})
