"""Run tracking: `metrics.jsonl` + `summary.json` in the run directory, optionally mirrored to W&B.

The run loop opens one `Tracker` per run (per Hydra job) and calls `log(row)` for every train, eval and
diagnostic event, `write_summary(summary)` at the end, and `finish()` (or uses it as a context manager).

Files (the contract `mltrain-compare` reads):

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

W&B (`logger.name=wandb`): one W&B run per run dir, `dir=run_dir` (offline files land in
`run_dir/wandb/offline-run-*`, upload later with `wandb sync run_dir/wandb/offline-run-*`). FLOPs is the
default x-axis of `train/loss`, `val/loss` and `diag/*`; `step` and `tokens` are logged too. `online`
without an API key, or an online init that fails (no network: bounded by `init_timeout`), falls back to
offline with one warning; if offline fails too, training goes on with `metrics.jsonl` only. Any W&B error
later (log, summary, finish) is one warning and W&B is off for the rest of the run: logging never kills
training. `logger.name=jsonl` never imports wandb. The W&B run id is kept in `run_dir/wandb/run_id`; a
resumed Tracker continues that run (`resume="allow"`), and each row goes to W&B with its row number as
the step, so the rows W&B already has from before the interruption are not sent twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from mltrain.runs import atomic
from mltrain.errors import StorageError
from mltrain.runs.names import shorten
from mltrain.runs.provenance import redact_tree, redacted_argv

log = logging.getLogger("mltrain.runs.tracking")

# Override keys that only steer bookkeeping (where/how results are logged or shown), never what is
# trained: they are left out of the configuration label, so runs that differ only in them are grouped.
# A key matches itself and anything below it (`logger` matches `logger.mode`, `hydra` `hydra/launcher`).
BOOKKEEPING_KEYS = (
    "seed",
    "hydra",
    "logger",
    "train.progress",
    "train.resume",
    "train.checkpoint_interval",
    "train.keep_checkpoints",
    "data.cache_dir",
    "data.prepare_if_missing",
)
# Left out for run_kind == "single" only: they cannot change a single-level run.
SINGLE_IRRELEVANT_KEYS = ("multilevel", "coarsening")

# W&B field limits: longer values are shortened with a hash suffix (the full label stays in the config
# and in summary.json).
_WANDB_MAX = {"name": 128, "group": 128, "job_type": 64, "tag": 64}
# Seconds wandb.init may take to reach the server before we fall back to offline. The WANDB_INIT_TIMEOUT
# environment variable, when set, wins (wandb reads it itself).
INIT_TIMEOUT_S = 30.0


# ---------------------------------------------------------------------------------------------
# Labels and names


def _override_key(override: str) -> str:
    """`+a.b=1` -> `a.b`; `~a.b` -> `a.b`; `hydra/launcher=joblib` -> `hydra.launcher`."""
    key = override.split("=", 1)[0].strip().lstrip("+~")
    if "@" in key:  # group@package=value
        key = key.split("@", 1)[0]
    return key.replace("/", ".")


def _matches(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _label_parts(overrides: Iterable[str], run_kind: str) -> list[str]:
    drop = BOOKKEEPING_KEYS + (SINGLE_IRRELEVANT_KEYS if run_kind == "single" else ())
    kept = {str(o).strip() for o in overrides if str(o).strip()}
    kept = {o for o in kept if not _matches(_override_key(o), drop)}
    return sorted(kept, key=lambda o: (_override_key(o), o))


def run_label(overrides: list[str], run_kind: str) -> str:
    """Configuration label shared by all seeds of one configuration (the W&B group).

    The overrides minus `seed=...` and the bookkeeping keys in BOOKKEEPING_KEYS (`hydra*`, `logger*`,
    `train.progress`, `train.resume`, the checkpoint keys, `data.cache_dir`, `data.prepare_if_missing`),
    minus `multilevel.*`/`coarsening*` when run_kind == "single"; sorted by key, joined with ",";
    "default" when nothing is left.
    """
    parts = _label_parts(overrides, run_kind)
    return ",".join(parts) if parts else "default"


def _seed_from(overrides: Iterable[str]) -> str | None:
    for o in overrides:
        if _override_key(str(o)) == "seed" and "=" in str(o):
            return str(o).split("=", 1)[1].strip()
    return None


def run_name(overrides: list[str], run_kind: str, seed: int | str | None = None) -> str:
    """Readable run name, e.g. `multilevel|coarsening=evenodd,multilevel.delta=0.5|seed=1`.

    `seed` defaults to the `seed=` override (omitted when there is none). The label part is cut to
    ~80 characters (with a short hash, so distinct labels keep distinct names).
    """
    label = shorten(run_label(overrides, run_kind), 80)
    seed = _seed_from(overrides) if seed is None else seed
    return f"{run_kind}|{label}" + (f"|seed={seed}" if seed is not None else "")




# ---------------------------------------------------------------------------------------------
# Files


def _json_default(obj: Any) -> Any:
    """numpy / torch scalars and 0-d tensors -> Python numbers; anything else -> str."""
    if hasattr(obj, "item"):
        try:
            return obj.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All rows of a metrics.jsonl, in file order. Blank and unparseable lines (a partial last line left
    by a crash) are skipped with one warning."""
    rows, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
    if bad:
        log.warning("%s: skipped %d unreadable line(s)", path, bad)
    return rows


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """JSON through a temp file next to `path` and os.replace: never a half-written file."""
    atomic.write_json(path, data, indent=2, default=_json_default)


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """Read a field from a dataclass, a DictConfig or a plain dict."""
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        value = cfg.get(key, default)
    else:
        value = getattr(cfg, key, default)
    return default if value is None else value


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
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return dict(config)


# ---------------------------------------------------------------------------------------------
# Tracker


class Tracker:
    """metrics.jsonl + summary.json in `run_dir`, mirrored to W&B when `logger_cfg.name == "wandb"`.

    `name`/`group` are used unless `logger_cfg.run_name`/`logger_cfg.group` are set (those win).
    Attributes after construction: `metrics_path`, `summary_path`, `wandb_mode` ("online", "offline"
    or None when W&B is not in use), `wandb_run` (the wandb Run or None).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        logger_cfg: Any,
        config: Any,
        *,
        name: str,
        group: str,
        job_type: str,
        resume: Mapping[str, int] | None = None,
    ) -> None:
        """`resume`: a `position()` saved earlier (with a checkpoint): rows after it are cut, and the W&B
        run of this run dir continues."""
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.summary_path = self.run_dir / "summary.json"
        self.name = str(_get(logger_cfg, "run_name", name))
        self.group = str(_get(logger_cfg, "group", group))
        self.job_type = str(job_type)
        self.wandb_run: Any = None
        self.wandb_mode: str | None = None
        self._wandb_skip_below = 0  # rows W&B already holds from before a resume
        self._finished = False
        self._resuming = resume is not None
        self.rows = 0  # whole rows in metrics.jsonl (a resumed run's earlier rows included)
        self._last_step: Any = None
        self._file: int | None = None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._open_metrics(resume)
        except OSError as err:
            if self._file is not None:
                os.close(self._file)
            if isinstance(err, StorageError):
                raise
            raise StorageError(f"cannot write {self.metrics_path} ({err.strerror or err})") from None
        if _get(logger_cfg, "name", "jsonl") == "wandb":
            self._start_wandb(logger_cfg, redact_tree(_plain(config)))

    # -- files ----------------------------------------------------------------------------------

    def _open_metrics(self, resume: Mapping[str, int] | None) -> None:
        """A raw append-only descriptor: each row goes down in one os.write, so it is written whole or,
        when the disk is full, cut back off (see _append). `resume`: cut the rows after that position."""
        if resume is not None:  # cut at the checkpoint's row boundary, verified (ConfigError otherwise)
            atomic.cut_at_row(self.metrics_path, int(resume["metrics_bytes"]), int(resume["metrics_rows"]))
            self.rows = int(resume["metrics_rows"])
        self._file = atomic.open_no_follow(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        if resume is None and os.fstat(self._file).st_size > 0:
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
        fd = self._file
        start = os.fstat(fd).st_size
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
        self._append((json.dumps(row, default=_json_default) + "\n").encode("utf-8"))
        self._last_step = row.get("step", self._last_step)
        index = self.rows - 1
        if self.wandb_run is not None and index >= self._wandb_skip_below:
            try:
                # step = the row's number (coarse rows share a fine step; the x-axis is flops), so a
                # resumed run's rows land where the interrupted run's were.
                self.wandb_run.log({k: v for k, v in row.items() if v is not None}, step=index)
            except Exception as err:  # noqa: BLE001 - logging never kills training
                self._wandb_failed("log", err)

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
        if self.wandb_run is not None:
            try:
                self.wandb_run.summary.update({k: v for k, v in summary.items() if v is not None})
            except Exception as err:  # noqa: BLE001
                self._wandb_failed("summary", err)

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
        if self.wandb_run is not None:
            run, self.wandb_run = self.wandb_run, None
            try:
                run.finish(exit_code=exit_code)
            except Exception as err:  # noqa: BLE001
                self._wandb_failed("finish", err)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(exit_code=1 if exc_type is not None else 0)
        return False  # re-raise

    # -- W&B ------------------------------------------------------------------------------------

    def _wandb_failed(self, what: str, err: BaseException) -> None:
        log.warning(
            "W&B %s failed (%s: %s); W&B is off for the rest of this run, metrics.jsonl goes on",
            what, type(err).__name__, first_line(err),
        )
        run, self.wandb_run, self.wandb_mode = self.wandb_run, None, None
        if run is not None and what != "finish":
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001
                pass

    def _start_wandb(self, logger_cfg: Any, config: dict) -> None:
        mode = _get(logger_cfg, "mode", "online")
        if mode == "disabled":
            log.info("logger.mode=disabled: W&B off, metrics.jsonl only")
            return
        try:
            import wandb
        except Exception as err:  # noqa: BLE001 - a broken install must not stop training
            log.warning("cannot import wandb (%s: %s); metrics.jsonl only", type(err).__name__, first_line(err))
            return
        tags = [shorten(str(t), _WANDB_MAX["tag"]) for t in (_get(logger_cfg, "tags", []) or [])]
        id_file = self.run_dir / "wandb" / "run_id"
        kwargs: dict[str, Any] = {}
        if self._resuming and id_file.exists():  # the same run again after an interruption, not a second one
            kwargs.update(id=id_file.read_text().strip(), resume="allow")
        kwargs.update(
            project=_get(logger_cfg, "project", "mltrain"),
            entity=_get(logger_cfg, "entity", None),
            name=shorten(self.name, _WANDB_MAX["name"]),
            group=shorten(self.group, _WANDB_MAX["group"]),
            job_type=shorten(self.job_type, _WANDB_MAX["job_type"]),
            tags=tags,
            config=config,
            dir=str(self.run_dir),
        )
        sync_hint = f"upload later with `wandb sync {self.run_dir / 'wandb'}/offline-run-*`"
        if mode == "online":
            reason = _api_key_problem(wandb)
            if reason is None:
                try:
                    self._init(wandb, kwargs, "online")
                except Exception as err:  # noqa: BLE001
                    reason = f"W&B online init failed ({type(err).__name__}: {first_line(err)})"
            if reason is None:
                return
            log.warning("%s; logging W&B offline to %s, %s", reason, self.run_dir / "wandb", sync_hint)
        try:
            self._init(wandb, kwargs, "offline")
        except Exception as err:  # noqa: BLE001
            log.warning(
                "W&B offline init failed (%s: %s); continuing with metrics.jsonl only",
                type(err).__name__, first_line(err),
            )

    def _init(self, wandb: Any, kwargs: dict, mode: str) -> None:
        settings = {}
        if mode == "online" and "WANDB_INIT_TIMEOUT" not in os.environ:
            settings["init_timeout"] = INIT_TIMEOUT_S
        with redacted_argv():  # W&B records the command line: without secret values
            run = wandb.init(mode=mode, settings=wandb.Settings(**settings), **kwargs)
        try:
            if self._resuming:
                self._wandb_skip_below = int(getattr(run, "step", 0) or 0)
            atomic.write_bytes(self.run_dir / "wandb" / "run_id", run.id.encode())
            run.define_metric("flops")
            run.define_metric("tokens")
            run.define_metric("step")
            for key in ("train/loss", "val/loss", "diag/*"):
                run.define_metric(key, step_metric="flops")
        except Exception:
            run.finish(exit_code=1)
            raise
        self.wandb_run, self.wandb_mode = run, mode


def _api_key_problem(wandb: Any) -> str | None:
    """Why W&B cannot go online with the credentials configured here (env, settings file, netrc): none
    found, or W&B refuses the one found (its words, never the key); None when there is one. Never prompts."""
    try:
        if wandb.login(prompt=False, verify=False):
            return None
    except TypeError:  # older wandb without `prompt=`: let init decide (it raises without a key)
        return None
    except Exception as err:  # noqa: BLE001
        return f"W&B rejected the API key configured here ({type(err).__name__}: {first_line(err)})"
    return "no W&B API key found (run `wandb login` or set WANDB_API_KEY)"


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""
