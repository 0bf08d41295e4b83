"""Resume state on disk: one file with everything `PlanRunner.state_dict()` captures, and the run
dir's folder of them.

The runner's state is exact mid-cycle (plan position, step within the phase, every optimizer, the
samplers' positions, the RNG, the loss sums of rows not yet written), so a run stopped anywhere and
restored into a runner built from the same config continues as if never stopped. A file also carries
what it was made from (model, coarsening scheme, plan): loading it into another one fails with one line
naming the difference, before anything is changed. Files are written atomically (a preempted save never
leaves a half file) and read with `torch.load(weights_only=True)` (no code runs from a checkpoint).

`run_dir/checkpoints/step-<fine steps>-<optimizer steps>.pt`: the newest `keep` are kept.
"""

from __future__ import annotations

import os
import pickle
import re
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from mltrain.runs.atomic import atomic_open, remove_stale_temps
from mltrain.errors import CheckpointError, StorageError, first_line
from mltrain.method.kinds import PhaseKind, RunKind, StepKind
from mltrain.method.paths import describe
from mltrain.method.plan import Phase
from mltrain.method.runner import PlanRunner

FORMAT = 1
FOLDER = "checkpoints"
_NAME = re.compile(r"step-(\d+)-(\d+)\.pt")


def _plain(value: Any) -> Any:
    """Config values as types torch.load(weights_only=True) reads back (an Enum becomes its value)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _phase_text(p: Phase) -> str:
    where = "fine" if not p.path else "coarse " + ".".join(map(str, p.path))
    text = f"{p.kind} {where}" + (f" x{p.steps}" if p.kind == PhaseKind.train else "")
    # a rival method's sub-paths and growths: another setting of them is another plan
    text += "".join(f" {describe(rule)}" for rule in (p.paths, p.growth) if rule is not None)
    return text + (f" (cycle {p.cycle})" if p.cycle is not None else "")


def identity(runner: PlanRunner) -> dict:
    """What a checkpoint belongs to: the model's shape, the coarsening scheme and the whole plan."""
    cfg = runner.cfg
    model = OmegaConf.to_container(cfg.model, resolve=True) if OmegaConf.is_config(cfg.model) else dict(cfg.model)
    scheme = {"run kind": runner.kind, "coarsening.scheme": cfg.coarsening.scheme}
    if runner.kind != RunKind.single:
        scheme.update({"coarsening.k": cfg.coarsening.k, "coarsening.step_scale": cfg.coarsening.step_scale,
                       "multilevel.levels": cfg.multilevel.levels})
    return {
        "model": {f"model.{k}": _plain(v) for k, v in model.items()},
        "scheme": {k: _plain(v) for k, v in scheme.items()},
        "plan": [_phase_text(p) for p in runner.plan],
    }


def _mismatch(saved: dict, here: dict) -> Optional[str]:
    for part in ("model", "scheme"):
        a, b = saved.get(part, {}), here[part]
        diffs = [f"{k}={a.get(k)!r} there, {b.get(k)!r} here" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if diffs:
            return f"another {part} ({'; '.join(diffs)})"
    a, b = saved.get("plan", []), here["plan"]
    if a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        first = f"phase {i}: {a[i] if i < len(a) else 'none'} there, {b[i] if i < len(b) else 'none'} here"
        return f"another plan ({len(a)} phases there, {len(b)} here; first difference at {first})"
    return None


def save_checkpoint(path: str | os.PathLike, runner: PlanRunner, extra: Optional[dict] = None) -> Path:
    """Write the runner's state (and `extra`: the run's own bookkeeping) atomically to `path`."""
    payload = {"format": FORMAT, "identity": identity(runner), "runner": runner.state_dict(), "extra": extra or {}}
    with atomic_open(path, "wb") as f:
        torch.save(payload, f)
    return Path(path)


def load_checkpoint(path: str | os.PathLike, runner: PlanRunner) -> dict:
    """Restore `runner` from `path` and return the file's `extra`. A file from another model, scheme or
    plan raises CheckpointError naming the difference, before the runner is touched."""
    try:
        payload = torch.load(path, map_location=runner.device, weights_only=True)
    except (OSError, EOFError, RuntimeError, pickle.UnpicklingError) as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {first_line(err)}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an mltrain checkpoint (format {FORMAT})")
    problem = _mismatch(payload["identity"], identity(runner))
    if problem:
        raise CheckpointError(f"checkpoint {path} is from {problem}")
    runner.load_state_dict(payload["runner"])
    return payload["extra"]


class CheckpointFolder:
    """`run_dir/checkpoints/`: numbered checkpoint files, the newest `keep` kept."""

    def __init__(self, run_dir: str | os.PathLike, keep: int = 2):
        self.path = Path(run_dir) / FOLDER
        self.keep = keep

    def files(self) -> list[Path]:
        """Checkpoint files, oldest first."""
        if not self.path.is_dir():
            return []
        found = [(tuple(map(int, m.groups())), p) for p in self.path.iterdir() if (m := _NAME.fullmatch(p.name))]
        return [p for _, p in sorted(found)]

    def latest(self) -> Optional[Path]:
        files = self.files()
        return files[-1] if files else None

    def save(self, runner: PlanRunner, extra: Optional[dict] = None) -> Path:
        s = runner.trainer.state
        try:
            path = save_checkpoint(self.path / f"step-{s.fine_steps:06d}-{s.optimizer_steps:08d}.pt", runner, extra)
        except (OSError, RuntimeError) as err:  # torch's zip writer turns a full disk into a RuntimeError
            cause = err if isinstance(err, OSError) else err.__context__
            if not isinstance(cause, OSError):
                raise
            kept = self.latest()  # the atomic write left no partial file
            raise StorageError(
                f"cannot write a checkpoint into {self.path} ({cause.strerror or cause}): the disk or the file-size "
                f"limit is full; the run stopped, " + (f"its last checkpoint {kept.name} is kept" if kept else
                                                        "no checkpoint was kept") + " and metrics.jsonl holds whole rows"
            ) from None
        for old in self.files()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def remove_temporaries(self) -> int:
        """Delete half-written files a killed save left behind."""
        return remove_stale_temps(self.path) if self.path.is_dir() else 0


class Cadence:
    """When a checkpoint is due: every `interval` fine steps, and inside coarse (or control) phases once
    `interval` fine steps' worth of FLOPs have gone by since the last checkpoint. 0: never (only the
    checkpoints at the end and on a signal)."""

    def __init__(self, interval: int, fine_step_flops: float, last_flops: float = 0.0):
        self.interval, self.fine_step_flops, self.last_flops = interval, fine_step_flops, last_flops

    def due(self, kind: StepKind, state: Any) -> bool:
        if self.interval <= 0:
            return False
        if kind == StepKind.fine:
            return state.fine_steps % self.interval == 0
        # a relative tolerance: FLOPs are float sums, and n steps must count as n steps
        return state.flops - self.last_flops >= self.interval * self.fine_step_flops * (1 - 1e-9)

    def mark(self, state: Any) -> None:
        self.last_flops = state.flops
