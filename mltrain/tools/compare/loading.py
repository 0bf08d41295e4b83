"""Runs in, trusted or not: run directories (or W&B runs) → `Run`s with their curves and their status.

A run is *usable* only when it finished with finite losses. Anything else (no summary.json: still
going or killed; a summary whose `status` says interrupted or diverged; a non-finite loss anywhere) is
kept as an excluded run with the reason, so the report lists it and no statistic ever uses it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, TypeGuard, TypeVar

import numpy as np

from mltrain.core.errors import CompareError, first_line
from mltrain.method.kinds import RunKind
from mltrain.runs.files import METRICS, RUN_RECORD, SUMMARY, read_metrics, read_run_record, read_summary
from mltrain.runs.keys import BUDGET_KEY, label_overrides, override_key, override_value, seed_of
from mltrain.runs.names import run_label

log = logging.getLogger("mltrain.tools.compare")
T = TypeVar("T")

# Reports list kinds in RunKind's order; a kind this version does not know comes after them.
KINDS_ORDER = {kind.value: i for i, kind in enumerate(RunKind)}
FINISHED = "finished"


@dataclass
class Curve:
    """Loss against cumulative training FLOPs, in logged order. `flops_blocks` is the same x-axis with
    a coarse step costed at (its blocks / the fine model's blocks) of a fine step: the "blocks only"
    convention; None for runs that did not log it."""

    flops: np.ndarray
    loss: np.ndarray
    flops_blocks: Optional[np.ndarray] = None

    @classmethod
    def empty(cls) -> "Curve":
        return cls(np.empty(0), np.empty(0), None)

    def __len__(self) -> int:
        return int(self.loss.size)


@dataclass
class Run:
    source: str  # run directory, or W&B run path
    label: str
    run_kind: str
    seed: Any
    summary: dict
    train: Curve  # level-0 (fine model) train rows, raw
    val: Curve
    status: str = FINISHED  # finished | unfinished | interrupted | diverged | empty | mismatch
    reason: Optional[str] = None  # why a run that is not usable is left out
    smoothed: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def key(self) -> tuple[str, str]:
        return (self.run_kind, self.label)

    @property
    def usable(self) -> bool:
        return self.status == FINISHED

    @property
    def machine(self) -> Optional[str]:
        """The machine the run was made on (summary.json's environment.machine_id), None when unrecorded."""
        env = self.summary.get("environment")
        machine = env.get("machine_id") if isinstance(env, dict) else None
        return str(machine) if machine else None

    @property
    def budget(self) -> float:
        """The fraction of train.max_steps this run trained for (its schedule ended there)."""
        value = self.summary.get("budget")
        if _finite(value):
            return float(value)
        for part in label_overrides(self.label):
            value_set = override_value(part) if override_key(part) == BUDGET_KEY else None
            if value_set is not None:
                try:
                    return float(value_set)
                except ValueError:
                    break
        return 1.0

    def total_flops(self, blocks: bool = False) -> Optional[float]:
        key = "total_flops_blocks" if blocks else "total_flops"
        v = self.summary.get(key)
        if _finite(v):
            return float(v)
        if blocks:
            if self.run_kind == RunKind.single:  # every step is a fine step: the conventions agree
                return self.total_flops()
            ends = [c.flops_blocks[-1] for c in (self.train, self.val) if c.flops_blocks is not None and len(c)]
        else:
            ends = [c.flops[-1] for c in (self.train, self.val) if len(c)]
        return float(max(ends)) if ends else None

    def curve(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs, loss) of `metric` (train: the smoothed fine-level rows; val: as logged)."""
        return (self.train.flops, self.smoothed) if metric == "train" else (self.val.flops, self.val.loss)

    def blocks_curve(self, metric: str) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """`curve` on the blocks-only x-axis (a single-level run's own); None when the run did not log it."""
        flops, loss = self.curve(metric)
        blocks = (self.train if metric == "train" else self.val).flops_blocks
        return (flops, loss) if self.run_kind == RunKind.single else (blocks, loss) if blocks is not None else None

    def final(self, metric: str) -> Optional[float]:
        c = self.curve(metric)
        return float(c[1][-1]) if c is not None and c[1].size else None


def label_family(label: str) -> str:
    parts = [p for p in label_overrides(label) if override_key(p) != BUDGET_KEY]
    return ",".join(parts) or "default"


@dataclass
class Configuration:
    run_kind: str
    label: str
    runs: list[Run]

    @property
    def key(self) -> tuple[str, str]:
        return (self.run_kind, self.label)

    @property
    def name(self) -> str:
        return f"{self.label} [{self.run_kind}]"

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]

    @property
    def budget(self) -> float:
        return self.runs[0].budget

    @property
    def family(self) -> str:
        return label_family(self.label)


def _finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_number(x: Any) -> TypeGuard[float]:  # an int or a float, no bool
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def curves_from_rows(rows: Iterable[dict]) -> tuple[Curve, Curve]:
    """(train, val): level-0 train rows and val rows with finite FLOPs and loss, in logged order."""
    cols: dict[str, list] = {k: [] for k in ("tf", "tl", "tb", "vf", "vl", "vb")}
    have_blocks = True
    for row in rows:
        f = row.get("flops")
        if not _finite(f):
            continue
        fb = row.get("flops_blocks")
        for prefix, key, wanted in (("t", "train/loss", row.get("level", 0) in (0, None)), ("v", "val/loss", True)):
            loss = row.get(key)
            if wanted and _finite(loss):
                cols[prefix + "f"].append(float(f))
                cols[prefix + "l"].append(float(loss))
                cols[prefix + "b"].append(float(fb) if _finite(fb) else math.nan)
                have_blocks = have_blocks and _finite(fb)
    arr = lambda k: np.asarray(cols[k], dtype=float)  # noqa: E731
    blocks = (lambda k: arr(k)) if have_blocks else (lambda k: None)
    return Curve(arr("tf"), arr("tl"), blocks("tb")), Curve(arr("vf"), arr("vl"), blocks("vb"))


def first_nonfinite(rows: Iterable[dict]) -> Optional[str]:
    """Where the first non-finite loss was logged ("train/loss at step 3 (level 1)"), or None."""
    for row in rows:
        for key, value in row.items():
            if key.endswith("loss") and _is_number(value) and not math.isfinite(value):
                level = row.get("level")
                where = f"step {row.get('step', '?')}" + (f" (level {level})" if level not in (None, 0) else "")
                return f"{key} = {value} at {where}"
    return None


def classify(summary: Optional[dict], rows: list[dict]) -> tuple[str, Optional[str]]:
    """(status, reason): finished with finite losses, or why the run cannot be used."""
    if summary is None:
        return "unfinished", f"no {SUMMARY}: the run is still going, or was killed before the end"
    status = summary.get("status")
    if status not in (None, FINISHED):
        detail = next((summary[k] for k in ("status_reason", "reason", "message") if summary.get(k)), None)
        return str(status), f"summary.json status is {status!r}" + (f": {detail}" if detail else "")
    bad = first_nonfinite(rows)
    if bad is not None:
        return "diverged", f"non-finite loss: {bad}"
    for key in ("final_train_loss", "final_val_loss"):
        v = summary.get(key)
        if _is_number(v) and not math.isfinite(v):
            return "diverged", f"non-finite {key} = {v} in {SUMMARY}"
    return FINISHED, None


RUN_FILES = (METRICS, SUMMARY, RUN_RECORD)  # any of them marks a run dir


def find_run_dirs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Run directories (holding metrics.jsonl, summary.json or run.json) at or below each path, sorted,
    unique. A folder with a run's files but no readable metrics.jsonl (none, or a folder of that name)
    is still a run dir, so that the report lists it as left out with the reason (`unreadable_metrics`)
    instead of dropping it unseen."""
    found: dict[str, Path] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise CompareError(f"no such file or directory: {p}")
        if not p.is_dir():
            raise CompareError(f"not a directory: {p}")
        for dirpath, dirnames, filenames in os.walk(p):
            if METRICS in dirnames or any(name in filenames for name in RUN_FILES):
                found.setdefault(os.path.realpath(dirpath), Path(dirpath))
                dirnames[:] = []  # a run dir's own subfolders (wandb/, .hydra/) hold no runs
            else:
                dirnames[:] = sorted(d for d in dirnames if d != "wandb" and not d.startswith("."))
    return sorted(found.values())


def _read_overrides(run_dir: Path) -> list[str] | None:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return None
    try:
        from omegaconf import OmegaConf

        return [str(o) for o in OmegaConf.load(path)]
    except Exception:  # noqa: BLE001 - a broken overrides file only costs the label
        return None


def _seed_from_overrides(overrides: list[str] | None) -> Any:
    seed = seed_of(overrides or [])
    try:
        return int(seed) if seed is not None else None
    except ValueError:
        return seed


def _read(what: str, path: Path, read: Callable[[], T]) -> T:
    try:
        return read()
    except (OSError, ValueError) as err:  # ValueError: bytes that are not UTF-8, a broken file
        raise CompareError(f"unreadable {what} {path}: {err}") from None


def load_run_dir(run_dir: Path) -> Run:
    summary = _read("summary", run_dir / SUMMARY, lambda: read_summary(run_dir))
    rows = _read("metrics", run_dir / METRICS, lambda: read_metrics(run_dir / METRICS))
    overrides = _read_overrides(run_dir)
    s = summary or {}
    # What the run is: from summary.json, else from the run.json it wrote at its start ({} without one).
    record = s if summary is not None else _read("run record", run_dir / RUN_RECORD,
                                                 lambda: read_run_record(run_dir) or {})
    run_kind = str(record.get("run_kind") or ("single" if summary is not None else "unknown"))
    label = record.get("label") or (run_label(overrides, run_kind) if overrides is not None else "default")
    seed = record.get("seed", _seed_from_overrides(overrides))
    status, reason = classify(summary, rows)
    train, val = curves_from_rows(rows)
    if status == FINISHED and not len(train) and not len(val):
        status, reason = "empty", "no finite train or val loss rows"
    return Run(str(run_dir), str(label), run_kind, seed, s, train, val, status, reason)


def unreadable_metrics(run_dir: Path) -> Optional[Run]:
    """An excluded run when the dir's metrics.jsonl is missing (named by its summary.json or run.json there)
    or not a regular file (a folder, a pipe: opening a pipe would wait for ever), else None."""
    path, record = run_dir / METRICS, {}
    if not os.path.lexists(path):
        for read in (read_summary, read_run_record):
            try:
                record = read(run_dir) or {}
            except (OSError, ValueError):
                record = {}
            if record:
                break
        present = " and ".join(name for name in (SUMMARY, RUN_RECORD) if (run_dir / name).exists())
        status, why = "no metrics", (f"no {METRICS} beside its {present}: its loss curves are missing (copied "
                                     "without it, or removed)")
    else:
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                return None
            status, why = "unreadable", f"{METRICS} is {'a folder' if path.is_dir() else 'not a regular file'}"
        except OSError as err:  # a dangling link, no permission
            status, why = "unreadable", f"{METRICS}: {err.strerror or err}"
    return Run(str(run_dir), str(record.get("label") or "?"), str(record.get("run_kind") or "?"), record.get("seed"),
               {}, Curve.empty(), Curve.empty(), status, why)


# A summary's total_flops and the last FLOPs its rows logged agree unless one of them is damaged.
FLOPS_AGREEMENT = 2.0


def vet(run: Run) -> None:
    """Exclude a usable run whose files contradict themselves: a seed that is not a number or a name
    (it could not pair runs), or a summary total_flops that its own metrics do not support."""
    if not run.usable:
        return
    if isinstance(run.seed, float) and run.seed.is_integer():
        run.seed = int(run.seed)
    if run.seed is not None and (isinstance(run.seed, bool) or not isinstance(run.seed, (int, str))):
        run.status, run.reason = "bad summary", f"seed {run.seed!r} is not an integer or a name"
        return
    logged = [c.flops[-1] for c in (run.train, run.val) if len(c)]
    total = run.summary.get("total_flops")
    if logged and _is_number(total):
        last = float(max(logged))
        if not (math.isfinite(total) and total > 0 and last / FLOPS_AGREEMENT <= total <= last * FLOPS_AGREEMENT):
            run.status, run.reason = "bad summary", (
                f"total_flops {total:.3g} in {SUMMARY} disagrees with {METRICS} (last logged FLOPs {last:.3g})")


def group_runs(runs: Iterable[Run]) -> list[Configuration]:
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault(r.key, []).append(r)
    configs = []
    for (kind, label), rs in groups.items():
        rs.sort(key=lambda r: (_seed_sort(r.seed), r.source))
        seeds = [r.seed for r in rs]
        dup = {s for s in seeds if seeds.count(s) > 1}
        if dup:
            log.warning("%s [%s]: several runs with seed(s) %s; all are kept", label, kind, sorted(map(str, dup)))
        configs.append(Configuration(kind, label, rs))
    configs.sort(key=lambda c: (KINDS_ORDER.get(c.run_kind, len(KINDS_ORDER)), c.run_kind, c.family, c.budget, c.label))
    return configs


def _seed_sort(seed: Any) -> tuple:
    return (0, seed, "") if isinstance(seed, (int, float)) else (1, 0, str(seed))


# ---------------------------------------------------------------------------------------------
# Comparability: the same data, tokenizer, held-out set and FLOP convention


def comparability(run: Run) -> dict[str, Any]:
    """What must agree between two runs for their losses and FLOPs to be compared. Keys a run did not
    record (runs from older versions) are absent and not checked."""
    s = run.summary
    data, held = s.get("data"), s.get("held_out")
    data = data if isinstance(data, dict) else {}
    held = held if isinstance(held, dict) else {}
    out = {
        "data": data.get("description"),
        "tokenizer": data.get("tokenizer"),
        "held-out set": held.get("fingerprint"),
        "FLOP convention": s.get("flops_formula"),
        "model (parameters)": s.get("n_params"),
    }
    return {k: v for k, v in out.items() if v is not None}


def mismatch(run: Run, reference: Run) -> Optional[str]:
    """Why `run` cannot be compared with `reference`, or None."""
    a, b = comparability(run), comparability(reference)
    diffs = [f"{k} {a[k]!r} (reference: {b[k]!r})" for k in a.keys() & b.keys() if a[k] != b[k]]
    return "different " + "; ".join(sorted(diffs)) if diffs else None


def identity(run: Run) -> tuple:
    """What a run is, by content: the digest of what it computes (run.json's config_digest; a run from an
    older version: its kind and label), its seed, and the data it saw (comparability)."""
    what = run.summary.get("config_digest") or (run.run_kind, run.label)
    return (what, str(run.seed), tuple(sorted((k, str(v)) for k, v in comparability(run).items())))


def result(run: Run) -> tuple:
    """What a run gave: its final losses and FLOPs as summary.json records them, and its logged curves'
    lengths and ends. A folder copied beside its original gives the same; a rerun at another commit or on
    another machine may not."""
    s = run.summary
    recorded = tuple(repr(s.get(k)) for k in ("final_val_loss", "final_train_loss", "total_flops", "fine_steps"))
    curves = tuple((len(c), repr(float(c.loss[-1])) if len(c) else None) for c in (run.train, run.val))
    return recorded + curves


def _said(run: Run) -> str:
    """A run in a warning line: its folder and what it gave."""
    val, flops = run.summary.get("final_val_loss"), run.summary.get("total_flops")
    what = [f"final val loss {val:.6g}" if _finite(val) else None, f"{flops:.4g} FLOPs" if _finite(flops) else None]
    return f"{run.source} ({', '.join(w for w in what if w) or 'no final figures'})"


def drop_duplicates(runs: list[Run]) -> list[str]:
    """Duplicates are the same run *and* the same result: every usable run whose identity and result an
    earlier one (by source) has is left out (status "duplicate"), counted once. Runs of one identity (config
    digest, seed, data) with different results are all kept, as replicates, and named: no folder is
    chosen over another by its path. The warning lines (none when nothing was found)."""
    first: dict[tuple, Run] = {}
    dropped: list[str] = []
    by_identity: dict[tuple, list[Run]] = {}
    for r in sorted((r for r in runs if r.usable), key=lambda r: r.source):
        kept = first.setdefault((identity(r), result(r)), r)
        if kept is not r:
            r.status, r.reason = "duplicate", f"the same run and result as {kept.source} (config digest, seed, data, " \
                                              "final losses and FLOPs)"
            dropped.append(f"{r.source} = {kept.source}")
        else:
            by_identity.setdefault(identity(r), []).append(r)
    lines = []
    if dropped:
        lines.append(f"{len(dropped)} run folder(s) hold a run already counted (the same config, seed, data and "
                     f"result), counted once: {'; '.join(dropped)}")
    for same in (rs for rs in by_identity.values() if len(rs) > 1):
        lines.append(f"{len(same)} run folders hold the same config and seed {same[0].seed} on the same data with "
                     f"different results (a rerun at another commit or on another machine?): all kept, as "
                     f"replicates of that seed: {'; '.join(_said(r) for r in same)}")
    return lines


def data_groups(runs: Iterable[Run]) -> list[list[Run]]:
    """The usable runs grouped by what must agree between them (comparability), largest group first."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        if r.usable:
            groups.setdefault(tuple(sorted((k, str(v)) for k, v in comparability(r).items())), []).append(r)
    return sorted(groups.values(), key=len, reverse=True)


DATA_FIELDS = ("data", "tokenizer", "held-out set")  # a group is "on" these; "with" the others


def differing_fields(groups: list[list[Run]]) -> list[str]:
    """The comparability fields (e.g. "held-out set", "model (parameters)") whose values differ between
    the groups of data_groups, in comparability's order: what a line about them names."""
    seen = [comparability(g[0]) for g in groups]
    keys = list(dict.fromkeys(k for c in seen for k in c))
    return [k for k in keys if len({str(c.get(k)) for c in seen}) > 1]


def describe_group(runs: list[Run], fields: Optional[Sequence[str]] = None) -> str:
    """`3 runs on data 'X', tokenizer 'bytes'`, `2 runs with model (parameters) 812,544`: a group of
    data_groups in words, by `fields` (those that differ between the groups; None: its data, tokenizer
    and held-out set)."""
    seen = comparability(runs[0])
    fields = [k for k in (fields if fields is not None else DATA_FIELDS) if k in seen]
    on = ", ".join(f"{k} {seen[k]!r}" for k in fields if k in DATA_FIELDS)
    with_ = ", ".join(f"{k} {_figure(seen[k])}" for k in fields if k not in DATA_FIELDS)
    return (f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f" on {on}" if on else "")
            + (f" with {with_}" if with_ else ""))


def _figure(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)


# ---------------------------------------------------------------------------------------------
# W&B source


def _history(wr: Any, metric: str, *more: str) -> list[dict]:
    """A W&B run's rows of `metric` with both FLOPs conventions (and `more`), else (older runs, without
    `level` or `flops_blocks`) with its FLOPs alone."""
    return (list(wr.scan_history(keys=["flops", "flops_blocks", metric, *more], page_size=10000))
            or list(wr.scan_history(keys=["flops", metric], page_size=10000)))


def load_wandb_runs(path: str, group: str | None, filters: list[str], timeout: int = 20) -> list[Run]:
    """Runs of ENTITY/PROJECT from the W&B public API (needs network and a key)."""
    query: dict[str, Any] = {}
    if group:
        query["group"] = group
    for f in filters:
        if "=" not in f:
            raise CompareError(f"--filter {f!r}: expected KEY=VALUE (e.g. config.seed=1, state=finished)")
        k, v = f.split("=", 1)
        try:
            query[k] = json.loads(v)
        except json.JSONDecodeError:
            query[k] = v
    try:
        import wandb

        api = wandb.Api(timeout=timeout)
        wruns = list(api.runs(path, filters=query or None))
    except Exception as err:  # noqa: BLE001 - offline, no key, no such project: one clear line
        raise CompareError(f"W&B: cannot list runs of {path!r} ({type(err).__name__}: {first_line(err)})") from None
    runs = []
    for wr in wruns:
        try:
            summary = {k: wr.summary[k] for k in wr.summary.keys() if not str(k).startswith("_")}
            if not summary.get("run_kind"):
                log.warning("W&B run %s has no run_kind in its summary (crashed or not mltrain); skipped", wr.path)
                continue
            rows = _history(wr, "train/loss", "level") + _history(wr, "val/loss")
            rows.sort(key=lambda r: r.get("_step", 0))
        except Exception as err:  # noqa: BLE001
            raise CompareError(
                f"W&B: cannot read run {'/'.join(wr.path)} ({type(err).__name__}: {first_line(err)})"
            ) from None
        run_kind = str(summary["run_kind"])
        label = summary.get("label") or wr.group or "default"
        seed = summary.get("seed", (wr.config or {}).get("seed"))
        status, reason = classify(summary, rows)
        state = getattr(wr, "state", "finished")
        if status == FINISHED and state not in ("finished", None):
            status, reason = "unfinished", f"W&B run state is {state!r}"
        train, val = curves_from_rows(rows)
        runs.append(Run(f"wandb:{'/'.join(wr.path)}", str(label), run_kind, seed, summary, train, val, status, reason))
    return runs
