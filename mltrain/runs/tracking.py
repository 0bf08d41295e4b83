"""Run tracking: `metrics.jsonl` + `summary.json` (+ `run.json`) in the run directory, optionally
mirrored to W&B (runs/wandb_mirror.py).

The run opens one `Tracker` per run (per Hydra job) and calls `log(row)` for every train, eval and
diagnostic event, `write_summary(summary)` at the end, and `finish()` (or uses it as a context manager).

Files (the contract `mltrain-compare` reads; runs/files.py reads them):

* `run.json` -- what the run is (runs/files.py: RUN_RECORD_FIELDS), written atomically when the tracker
  opens, before any row, when the run passes `record=`.
* `metrics.jsonl` -- one JSON object per `log()` call, each row one `os.write` to an append-only file
  descriptor, so a crash keeps every row logged before it. A row is written whole or not at all: when
  the disk (or the file-size limit) is full, the part that got through is cut off again and the run
  stops with StorageError, naming the file and the rows it keeps. If the file already exists (a
  second Tracker on the same directory) new rows are **appended**; earlier rows are never changed. A
  partial last line left by a killed process is closed with a newline first, so the appended rows stay
  parseable (`read_metrics` skips the one broken line). A resumed run passes `resume=` the `position()`
  saved with its checkpoint: the rows written after it (which the resumed run writes again) are cut
  first, so the file has no duplicated or missing rows. Non-finite floats are written as
  `NaN`/`Infinity`, which Python's `json` reads back.
* `summary.json` -- written atomically (temp file in the same folder, fsync, `os.replace`), so readers
  see either the previous or the new summary, never half of one.

`logger.name=jsonl` never imports wandb; with `logger.name=wandb` a W&B error is one warning and never
stops training. The `logger` section of the run config (LoggerConfig, mltrain/runs/logger.py) configures it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from mltrain.core.errors import StorageError
from mltrain.core import atomic
from mltrain.runs.files import METRICS, RUN_RECORD, SUMMARY, json_default, write_json_atomic, write_run_record
from mltrain.runs.logger import LoggerConfig, LoggerMode, LoggerName  # noqa: F401 - the section's public home is here too
from mltrain.runs.provenance import redact_tree
from mltrain.runs.wandb_mirror import WandbMirror, setting

log = logging.getLogger("mltrain.runs.tracking")


def _plain(config: Any) -> dict:
    if config is None:
        return {}
    if isinstance(config, dict):
        return config
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(config):
            return OmegaConf.to_container(config, resolve=True, enum_to_str=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return dict(config)


class Tracker:
    """metrics.jsonl + summary.json (+ run.json) in `run_dir`, mirrored to W&B when `logger_cfg.name == "wandb"`.

    `name`/`group` are used unless `logger_cfg.run_name`/`logger_cfg.group` are set (those win).
    Attributes after construction: `metrics_path`, `summary_path`, `wandb_mode` ("online", "offline"
    or None when W&B is not in use), `wandb_run` (the wandb Run or None).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        logger_cfg: LoggerConfig,
        config: Any,
        *,
        name: str,
        group: str,
        job_type: str,
        resume: Mapping[str, int] | None = None,
        record: Optional[dict] = None,
    ) -> None:
        """`resume`: a `position()` saved earlier (with a checkpoint): rows after it are cut, and the W&B
        run of this run dir continues. `record`: what the run is, written to run.json first."""
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / METRICS
        self.summary_path = self.run_dir / SUMMARY
        self.name = str(setting(logger_cfg, "run_name", name))
        self.group = str(setting(logger_cfg, "group", group))
        self.job_type = str(job_type)
        self._finished = False
        self.rows = 0  # whole rows in metrics.jsonl (a resumed run's earlier rows included)
        self._last_step: Any = None
        self._file: int | None = None
        self._size = 0  # metrics.jsonl's length in bytes, once open
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._open_metrics(resume)
            if record is not None:
                write_run_record(self.run_dir, record)
        except OSError as err:
            if self._file is not None:
                os.close(self._file)
            if isinstance(err, StorageError):
                raise
            path = self.metrics_path if self._file is None else self.run_dir / RUN_RECORD
            raise StorageError(f"cannot write {path} ({err.strerror or err})") from None
        self.wandb: Optional[WandbMirror] = None
        if setting(logger_cfg, "name", "jsonl") == "wandb":
            self.wandb = WandbMirror.start(self.run_dir, logger_cfg, redact_tree(_plain(config)), name=self.name,
                                           group=self.group, job_type=self.job_type, resuming=resume is not None)

    @property
    def wandb_run(self) -> Any:
        """The wandb Run, or None when W&B is not in use (or was turned off by an error)."""
        return self.wandb.run if self.wandb is not None else None

    @property
    def wandb_mode(self) -> Optional[str]:
        """`online`, `offline`, or None when W&B is not in use."""
        return self.wandb.mode if self.wandb is not None else None

    def _open_metrics(self, resume: Mapping[str, int] | None) -> None:
        """A raw append-only descriptor: each row goes down in one os.write, so it is written whole or,
        when the disk is full, cut back off (see _append). `resume`: cut the rows after that position."""
        if resume is not None:  # cut at the checkpoint's row boundary, verified (ConfigError otherwise)
            atomic.cut_at_row(self.metrics_path, int(resume["metrics_bytes"]), int(resume["metrics_rows"]))
            self.rows = int(resume["metrics_rows"])
        self._file = atomic.open_no_follow(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._size = os.fstat(self._file).st_size  # kept by _append: no fstat per row
        if resume is None and self._size > 0:
            with open(self.metrics_path, "rb") as f:
                data = f.read()
            torn = not data.endswith(b"\n")
            self.rows = data.count(b"\n")
            if torn:
                self._append(b"\n")  # close a partial last line left by a killed process (one more row)
            log.info("%s exists: appending new rows after the existing ones", self.metrics_path)

    def _append(self, data: bytes) -> None:
        """Append one row (`data` ends with a newline) whole, or not at all: on any write error (disk
        full, file-size limit, a read-only remount) the file is cut back to its size before the row,
        and StorageError says what it keeps."""
        fd, start = self._file, self._size
        if fd is None:
            raise ValueError(f"{self.metrics_path} is not open: a row is appended between open and finish only")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as err:
            try:
                os.ftruncate(fd, start)  # shrinking a file works on a full disk and under RLIMIT_FSIZE
                kept = f"it keeps its {self.rows:,} whole rows" + (
                    f" (to step {self._last_step})" if self._last_step is not None else "")
            except OSError:
                kept = "its last row may be torn (read_metrics skips it)"
            raise StorageError(
                f"cannot write {self.metrics_path} ({atomic.full_or_denied(err)}); the run stopped and {kept}; "
                f"no summary.json was written"
            ) from None
        self._size += len(data)
        self.rows += 1

    def position(self) -> dict:
        """Where metrics.jsonl stands (bytes and rows), to store with a checkpoint and pass as `resume=`."""
        if self._file is None:
            raise RuntimeError("Tracker.position() after finish()")
        return {"metrics_bytes": os.fstat(self._file).st_size, "metrics_rows": self.rows}

    def log(self, row: Mapping[str, Any]) -> None:
        """Append one row to metrics.jsonl (one write, whole or not at all) and forward it to W&B."""
        row = dict(row)
        if self._file is None:
            raise RuntimeError("Tracker.log() after finish()")
        self._append((json.dumps(row, default=json_default) + "\n").encode("utf-8"))
        self._last_step = row.get("step", self._last_step)
        if self.wandb is not None:
            self.wandb.log(row, index=self.rows - 1)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """summary.json (atomic replace) and the W&B run summary."""
        summary = dict(summary)
        try:
            write_json_atomic(self.summary_path, summary)
        except OSError as err:  # the temporary file is gone again (atomic_open); metrics.jsonl is whole
            raise StorageError(
                f"cannot write {self.summary_path} ({err.strerror or err}); the run finished and "
                f"{self.metrics_path.name} keeps all its {self.rows:,} rows"
            ) from None
        if self.wandb is not None:
            self.wandb.summary(summary)

    def finish(self, exit_code: int = 0) -> None:
        """Close metrics.jsonl and finish the W&B run. Safe to call more than once."""
        if self._finished:
            return
        self._finished = True
        if self._file is not None:
            try:
                os.close(self._file)
            finally:
                self._file = None
        if self.wandb is not None:
            self.wandb.finish(exit_code)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self.finish(exit_code=1 if exc_type is not None else 0)
        return False  # re-raise
