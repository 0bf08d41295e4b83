"""Resume state on disk: one file with everything `PlanRunner.state_dict()` captures, and the run
dir's folder of them.

The runner's state is exact mid-cycle (plan position, step within the phase, every optimizer, the
samplers' positions, the RNG, the loss sums of rows not yet written), so a run stopped anywhere and
restored into a runner built from the same config continues as if never stopped.

A file proves which run it belongs to: its identity holds the model, the method's scheme, the plan, and
every config value that changes what the run computes (all keys but the bookkeeping ones, with a SHA-256
over them) and a fingerprint of the training and validation tokens. A checkpoint of another run (another
seed, learning rate, data, ...) is refused with one line naming the difference, before anything is
changed. Files are written atomically (a preempted save never leaves a half file) and read with
`torch.load(weights_only=True)` (no code runs from a checkpoint); a damaged one (empty, cut, not a
checkpoint, keys missing) is named in one warning and the next older one is used instead
(`load_latest`).

`run_dir/checkpoints/step-<fine steps>-<optimizer steps>.pt`: the newest `keep` are kept. When they are
taken (`CheckpointSaver`, the runner's after-step hook): every train.checkpoint_interval fine steps (or
their FLOPs inside phases of other step kinds), at the end and on a signal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from mltrain.core.atomic import atomic_open, cut_at_row, full_or_denied, refuse_links, remove_stale_temps
from mltrain.core.errors import CheckpointError, StorageError
from mltrain.core.plain import plain
from mltrain.method.kinds import StepKind
from mltrain.method.plan import phase_text
from mltrain.runs.keys import is_bookkeeping
from mltrain.runs.tracking import Tracker
from mltrain.training.resume import new_key_at_default
from mltrain.training.run_config import RunConfig
from mltrain.training.runner import PlanRunner

log = logging.getLogger("mltrain")

FORMAT = 2  # 2: the identity holds the run's computation config and data fingerprint
FOLDER = "checkpoints"
_NAME = re.compile(r"step-(\d+)-(\d+)\.pt")
# What PlanRunner.state_dict() holds, with the type each entry must have (a run's parts add entries of
# their own, which they check as they load them).
_RUNNER_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": dict, "fine_optimizer": dict, "own_optimizers": dict, "train_state": dict, "samplers": dict,
    "elapsed_s": (int, float), "last_loss": dict, "torch_rng": torch.Tensor, "cuda_rng": list}
# Entries that files written before a rename name otherwise: read under today's names.
_RENAMED = {"coarse_optimizers": "own_optimizers"}
_WINDOWS, _WINDOW = 16, 1024  # the data fingerprint reads 16 windows of 1,024 tokens of every array


class DamagedCheckpoint(CheckpointError):
    """A file that is not a whole mltrain checkpoint (empty, cut, garbage, keys missing): an older one
    may stand in for it."""


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: _plain(node)}


def computation_config(cfg: RunConfig) -> dict[str, Any]:
    """Every config value of the typed `cfg` that changes what the run computes, flattened (`optim.lr`: 0.001)."""
    return {k: v for k, v in sorted(_flat(plain(cfg)).items()) if not is_bookkeeping(k)}


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def data_fingerprint(*splits: Sequence[np.ndarray]) -> str:
    """SHA-256 over the length of every token array and 16 windows of it spread evenly from its start to
    its end: another corpus, tokenizer or split changes it; reading it costs milliseconds at any size."""
    h = hashlib.sha256()
    for arrays in splits:
        h.update(f"split {len(arrays)}".encode())
        for a in arrays:
            h.update(f"|{len(a)}|{np.dtype(a.dtype).str}".encode())
            starts = np.linspace(0, max(len(a) - _WINDOW, 0), _WINDOWS).astype(np.int64)
            for start in np.unique(starts):
                h.update(np.ascontiguousarray(a[start : start + _WINDOW]).tobytes())
    return h.hexdigest()


def _plain(value: Any) -> Any:
    """Config values as types torch.load(weights_only=True) reads back (an Enum becomes its value, a run
    kind its plain string)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def identity(runner: PlanRunner) -> dict:
    """What a checkpoint belongs to: the model's shape, the method's scheme (the run kind and the method's
    `identity()`), the whole plan, the computation config (and its digest) and the data's fingerprint."""
    cfg = runner.cfg
    model = asdict(cfg.model)
    scheme = {"run kind": runner.kind, **runner.method.identity()}
    config = computation_config(cfg)
    return {
        "model": {f"model.{k}": _plain(v) for k, v in model.items()},
        "scheme": {k: _plain(v) for k, v in scheme.items()},
        "plan": [phase_text(p) for p in runner.plan],
        "config": config,
        "config_sha256": config_digest(config),
        "data": data_fingerprint(runner.streams["fine"].arrays, runner.evaluator.val_arrays),
    }


def _config_mismatch(saved: dict, here: dict, schema: Optional[type] = None) -> Optional[str]:
    """The config difference that makes a checkpoint another run's; a key the checkpoint lacks that holds
    its default in the dataclass `schema` (the run's Config) is none (added to the schema since the
    checkpoint was written)."""
    if saved.get("config_sha256") == here["config_sha256"]:
        return None
    a, b = saved.get("config") or {}, here["config"]
    missing = object()
    diffs = [f"{k}={a.get(k, missing)!r} there, {b.get(k, missing)!r} here".replace(repr(missing), "unset")
             for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)
             and not (k not in a and new_key_at_default(schema, k, b[k]))]
    if not diffs:
        return None
    shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
    return f"another run (its config differs: {shown or 'the digest differs'})"


def _mismatch(saved: dict, here: dict, schema: Optional[type] = None) -> Optional[str]:
    for part in ("model", "scheme"):
        # the scheme's settings that the method names now (a setting an older file names besides them is
        # compared with the config below)
        a, b = saved.get(part, {}), here[part]
        keys = set(b) if part == "scheme" else set(a) | set(b)
        diffs = [f"{k}={a.get(k)!r} there, {b.get(k)!r} here" for k in sorted(keys) if a.get(k) != b.get(k)]
        if diffs:
            return f"another {part} ({'; '.join(diffs)})"
    a, b = saved.get("plan", []), here["plan"]
    if a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        first = f"phase {i}: {a[i] if i < len(a) else 'none'} there, {b[i] if i < len(b) else 'none'} here"
        return f"another plan ({len(a)} phases there, {len(b)} here; first difference at {first})"
    problem = _config_mismatch(saved, here, schema)
    if problem is None and saved.get("data") != here["data"]:
        problem = "another run (it trained on other data: the token fingerprint differs)"
    return problem


def save_checkpoint(path: str | os.PathLike, runner: PlanRunner, extra: Optional[dict] = None) -> Path:
    """Write the runner's state (and `extra`: the run's own bookkeeping) atomically to `path`."""
    payload = {"format": FORMAT, "identity": identity(runner), "runner": runner.state_dict(), "extra": extra or {}}
    with atomic_open(path, "wb") as f:
        torch.save(payload, f)
    return Path(path)


def _read(path: str | os.PathLike, device: Any) -> Any:
    """The file's payload; DamagedCheckpoint naming the file when torch cannot read it. torch's advice to
    load with weights_only=False (which runs the file's code) is never passed on."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Detected pickle protocol ..." for a file torch did not write
            return torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any way a file fails to load is a file that cannot be used
        text = str(err)
        found = re.search(r"GLOBAL ([\w.]+)", text)
        if found:
            reason = (f"it asks to run {found.group(1)}, so mltrain did not write it (mltrain loads tensors and "
                      "plain values only and never runs code from a checkpoint)")
        elif os.path.exists(path) and os.path.getsize(path) == 0:
            reason = "it is empty"
        elif isinstance(err, OSError):
            reason = err.strerror or text
        else:
            reason = "it is cut, or not a checkpoint at all"
    raise DamagedCheckpoint(f"cannot read checkpoint {path}: {reason}")


_IDENTITY_PARTS = {"model": dict, "scheme": dict, "plan": list, "config": dict, "config_sha256": str, "data": str}


def _damaged(path: Any, what: str) -> DamagedCheckpoint:
    return DamagedCheckpoint(f"cannot read checkpoint {path}: {what}")


def _check_identity(path: Any, payload: Any) -> dict:
    """The payload's identity; DamagedCheckpoint (or CheckpointError for another format) otherwise."""
    if not isinstance(payload, dict):
        raise _damaged(path, f"a {type(payload).__name__}, not an mltrain checkpoint")
    if payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an mltrain checkpoint of format {FORMAT} (format "
                              f"{payload.get('format')!r}): it cannot prove which run it belongs to")
    ident = payload.get("identity")
    if not isinstance(ident, dict) or any(not isinstance(ident.get(k), t) for k, t in _IDENTITY_PARTS.items()):
        raise _damaged(path, "its identity (which run it belongs to) is missing or incomplete")
    return ident


def _check_state(path: Any, payload: dict, runner: PlanRunner) -> None:
    """DamagedCheckpoint unless the payload has every part a runner needs, of the right type and shape."""
    for part in ("runner", "extra"):
        if not isinstance(payload.get(part), dict):
            raise _damaged(path, f"its {part!r} part is missing")
    state = payload["runner"]
    for old, new in _RENAMED.items():
        if old in state and new not in state:
            state[new] = state.pop(old)
    for key, kind in _RUNNER_KEYS.items():
        if not isinstance(state.get(key), kind):
            raise _damaged(path, f"runner state {key!r} is missing or not a {getattr(kind, '__name__', 'number')}")
    own, saved = runner.trainer.model.state_dict(), state["model"]
    if set(saved) != set(own) or any(getattr(saved[k], "shape", None) != v.shape for k, v in own.items()):
        raise _damaged(path, "its model weights do not match the model's names and shapes")


def load_checkpoint(path: str | os.PathLike, runner: PlanRunner) -> dict:
    """Restore `runner` from `path` and return the file's `extra`. A file of another run raises
    CheckpointError naming the difference, a damaged one DamagedCheckpoint, both before the runner is
    touched (a file that passes every check and still fails to load is DamagedCheckpoint too)."""
    payload = _read(path, runner.device)
    problem = _mismatch(_check_identity(path, payload), identity(runner), type(runner.cfg))
    if problem:
        raise CheckpointError(f"checkpoint {path} is from {problem}")
    _check_state(path, payload, runner)
    try:
        runner.load_state_dict(payload["runner"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
        detail = " ".join(str(err).split())[:200]
        raise _damaged(path, f"its runner state does not load ({detail})") from None
    return payload["extra"]


def load_latest(folder: "CheckpointFolder", runner: PlanRunner) -> Optional[tuple[Path, dict]]:
    """The newest checkpoint of `folder` that loads into `runner`, and its `extra`; None when there is
    none. A damaged newer file is named in one warning each and skipped (left in place; the folder
    never counts it again); a checkpoint of another run, or only damaged ones, raise CheckpointError."""
    damaged: list[DamagedCheckpoint] = []
    for path in reversed(folder.files()):
        try:
            extra = load_checkpoint(path, runner)
        except DamagedCheckpoint as err:
            damaged.append(err)
            folder.damaged.add(path)
            continue
        size, rows = extra.get("metrics_bytes"), extra.get("metrics_rows")
        if isinstance(size, int) and isinstance(rows, int):  # the rows it saw are still there, whole: before any log line
            cut_at_row(folder.path.parent / "metrics.jsonl", size, rows, check_only=True)
        for bad in damaged:
            log.warning("%s; resuming from the older %s instead", bad, path.name)
        return path, extra
    if damaged:
        raise CheckpointError(f"{damaged[0]}" + (f" (and {len(damaged) - 1} older ones cannot be read either)"
                                                 if len(damaged) > 1 else "") + "; nothing was changed")
    return None


class CheckpointFolder:
    """`run_dir/checkpoints/`: numbered checkpoint files, the newest `keep` kept."""

    def __init__(self, run_dir: str | os.PathLike, keep: int = 2):
        self.path = Path(run_dir) / FOLDER
        self.keep = keep
        self.damaged: set[Path] = set()  # files load_latest could not read: never counted, never pruned

    def files(self) -> list[Path]:
        """Checkpoint files, oldest first (damaged ones left out)."""
        if not self.path.is_dir():
            return []
        found = [(tuple(map(int, m.groups())), p) for p in self.path.iterdir()
                 if (m := _NAME.fullmatch(p.name)) and p not in self.damaged]
        return [p for _, p in sorted(found)]

    def latest(self) -> Optional[Path]:
        files = self.files()
        return files[-1] if files else None

    def save(self, runner: PlanRunner, extra: Optional[dict] = None) -> Path:
        s = runner.trainer.state
        refuse_links([self.path])
        try:
            path = save_checkpoint(self.path / f"step-{s.fine_steps:06d}-{s.optimizer_steps:08d}.pt", runner, extra)
        except (OSError, RuntimeError) as err:  # torch's zip writer turns a full disk into a RuntimeError
            cause = err if isinstance(err, OSError) else err.__context__
            if not isinstance(cause, OSError):
                raise
            kept = self.latest()  # the atomic write left no partial file
            raise StorageError(
                f"cannot write a checkpoint into {self.path} ({full_or_denied(cause)}); the run stopped, "
                + (f"its last checkpoint {kept.name} is kept" if kept else "no checkpoint was kept")
                + " and metrics.jsonl holds whole rows"
            ) from None
        self.damaged.discard(path)  # a damaged file of the same step is replaced by this one
        for old in self.files()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def remove_temporaries(self) -> int:
        """Delete half-written files a killed save left behind."""
        return remove_stale_temps(self.path) if self.path.is_dir() else 0


class Cadence:
    """When a checkpoint is due: every `interval` fine steps, and inside phases of other step kinds once
    `interval` fine steps' worth of FLOPs have gone by since the last checkpoint. 0: never (only the
    checkpoints at the end and on a signal)."""

    def __init__(self, interval: int, fine_step_flops: float, last_flops: float = 0.0):
        self.interval, self.fine_step_flops, self.last_flops = interval, fine_step_flops, last_flops

    def due(self, kind: str, state: Any) -> bool:
        if self.interval <= 0:
            return False
        if kind == StepKind.fine:
            return state.fine_steps % self.interval == 0
        # a relative tolerance: FLOPs are float sums, and n steps must count as n steps
        return state.flops - self.last_flops >= self.interval * self.fine_step_flops * (1 - 1e-9)

    def mark(self, state: Any) -> None:
        self.last_flops = state.flops


class CheckpointSaver:
    """A run's checkpoints into `folder`: on their cadence (Cadence: every `interval` fine steps, or their
    FLOPs inside phases of other step kinds), at the end and on a signal (`save`). Never one of a state after a bad
    step (every rank checks), never two of one position; rank 0 writes the one file of the job (ranks > 0
    have no `tracker`). Time spent here is not training time. `after_step` is the runner's hook."""

    def __init__(self, runner: PlanRunner, folder: CheckpointFolder, tracker: Optional[Tracker], resumed: dict,
                 initial_val: float, interval: int, fine_step_flops: float):
        self.runner, self.folder, self.tracker, self.initial_val = runner, folder, tracker, initial_val
        self.cadence = Cadence(interval, fine_step_flops, resumed.get("last_checkpoint_flops", 0.0))
        # a resumed run's position is its checkpoint's: nothing new to save there
        self.saved_at = runner.trainer.state.optimizer_steps if "initial_val_loss" in resumed else -1

    def after_step(self, kind: str) -> None:
        if self.cadence.due(kind, self.runner.trainer.state):
            self.save()

    def save(self) -> Optional[Path]:
        trainer = self.runner.trainer
        if trainer.state.optimizer_steps == self.saved_at:  # no step since the last one: it is still a valid
            return self.folder.latest()  # resume point (a restrict or prolong after it is redone)
        with trainer.clock.apart():
            trainer.check_finite(True, self.runner.position.step_in_phase)  # never a checkpoint of a state after a bad step (every rank)
            self.cadence.mark(trainer.state)
            self.saved_at = trainer.state.optimizer_steps
            if self.tracker is None:  # ranks > 0: rank 0 writes the one checkpoint of the job
                return None
            extra = {"initial_val_loss": self.initial_val, "last_checkpoint_flops": self.cadence.last_flops,
                     **self.tracker.position()}
            return self.folder.save(self.runner, extra)
