"""`mltrain-compare`: loss-versus-FLOPs comparison of multilevel runs with single-level training.

    mltrain-compare multirun/2025-01-01/12-00-00            # a sweep folder (searched recursively)
    mltrain-compare runA runB runC --smooth 20 --logx --out report/
    mltrain-compare --wandb my-team/mltrain --group 'coarsening=evenodd'   # pull runs from W&B instead

Inputs: run directories (folders holding both `summary.json` and `metrics.jsonl`, as written by
`mltrain.tracking.Tracker`) found under the given paths, or W&B runs (`--wandb`). Runs are grouped into
configurations by `summary.label` + `summary.run_kind`, so the seeds of one configuration go together.

Curves
  * train loss: only fine-model rows (`level` 0; coarse levels are losses of another model), smoothed by
    a **trailing moving average over the last N such rows** (`--smooth N`, causal, so "first reaches"
    never looks ahead; the first N-1 points average what exists so far). Rows with a non-finite loss are
    dropped.
  * val loss: the `val/loss` rows as logged (always the fine model).

Numbers
  * target: the reference configuration's final loss (last smoothed train value; last val value).
  * FLOPs to target: the first FLOPs at which a run's curve is <= the target, linearly interpolated
    between the two logged rows around the crossing; "not reached" if it never gets there.
  * saving = 1 - F_run / F_ref, F_ref = the FLOPs the reference run needed to first reach its own final
    loss (about its total FLOPs).
  * pairing: a run is compared with the reference run of the same seed; when the reference has no run
    with that seed, with the reference's mean target and mean F_ref (marked `*` in the table,
    `"paired": false` in the JSON).
  * per configuration: mean ± sample std (ddof=1) over the seeds that reached the target; seeds that did
    not are excluded and the count "k/n reached" is shown.
  * references: the single-level baseline (the only `run_kind == "single"` configuration, or
    `--baseline LABEL`) for every other configuration; and, for each multilevel configuration, the
    schedule control (`run_kind == "schedule_control"`) whose label is the multilevel label plus
    `multilevel.control=schedule`, else the only control present, else `--control LABEL`.

Outputs (in `--out`, default: the common parent of the given paths): `comparison.png` (two panels, mean
over seeds on a common FLOPs grid with a min-max band), `comparison.md` (printed to stdout too),
`comparison.json` (every number).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from mltrain.tracking import first_line, read_metrics, run_label, write_json_atomic

log = logging.getLogger("mltrain.compare")

SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
KINDS_ORDER = {"single": 0, "multilevel": 1, "schedule_control": 2}


class CompareError(Exception):
    """Bad input for a comparison: reported as one line, non-zero exit."""


# ---------------------------------------------------------------------------------------------
# Runs


@dataclass
class Run:
    source: str  # run directory, or W&B run path
    label: str
    run_kind: str
    seed: Any
    summary: dict
    train_flops: np.ndarray  # level-0 train rows, raw
    train_loss: np.ndarray
    val_flops: np.ndarray
    val_loss: np.ndarray
    smoothed: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def key(self) -> tuple[str, str]:
        return (self.run_kind, self.label)


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


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def curves_from_rows(rows: Iterable[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_flops, train_loss, val_flops, val_loss): level-0 train rows and val rows, finite only,
    in logged order."""
    tf, tl, vf, vl = [], [], [], []
    for row in rows:
        f = row.get("flops")
        if not _finite(f):
            continue
        loss = row.get("train/loss")
        level = row.get("level", 0)
        if _finite(loss) and (level in (0, None)):
            tf.append(float(f))
            tl.append(float(loss))
        loss = row.get("val/loss")
        if _finite(loss):
            vf.append(float(f))
            vl.append(float(loss))
    arr = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    return arr(tf), arr(tl), arr(vf), arr(vl)


def find_run_dirs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Run directories (holding summary.json and metrics.jsonl) at or below each path, sorted, unique."""
    found: dict[str, Path] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise CompareError(f"no such file or directory: {p}")
        if not p.is_dir():
            raise CompareError(f"not a directory: {p}")
        for dirpath, dirnames, filenames in os.walk(p):
            if SUMMARY in filenames and METRICS in filenames:
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
    except Exception:  # noqa: BLE001
        return None


def load_run_dir(run_dir: Path) -> Run:
    try:
        with open(run_dir / SUMMARY, encoding="utf-8") as f:
            summary = json.load(f)
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        raise CompareError(f"unreadable summary {run_dir / SUMMARY}: {err}") from None
    run_kind = str(summary.get("run_kind") or "single")
    label = summary.get("label")
    if not label:
        overrides = _read_overrides(run_dir)
        label = run_label(overrides, run_kind) if overrides is not None else "default"
    try:
        rows = read_metrics(run_dir / METRICS)
    except OSError as err:
        raise CompareError(f"unreadable metrics {run_dir / METRICS}: {err}") from None
    tf, tl, vf, vl = curves_from_rows(rows)
    return Run(str(run_dir), str(label), run_kind, summary.get("seed"), summary, tf, tl, vf, vl)


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
    configs.sort(key=lambda c: (KINDS_ORDER.get(c.run_kind, 9), c.run_kind, c.label))
    return configs


def _seed_sort(seed: Any) -> tuple:
    return (0, seed, "") if isinstance(seed, (int, float)) else (1, 0, str(seed))


# ---------------------------------------------------------------------------------------------
# Curves and numbers


def moving_average(values: np.ndarray, n: int) -> np.ndarray:
    """Trailing moving average: out[i] = mean(values[max(0, i-n+1) : i+1])."""
    values = np.asarray(values, dtype=float)
    if n <= 1 or values.size == 0:
        return values.copy()
    c = np.concatenate([[0.0], np.cumsum(values)])
    i = np.arange(1, values.size + 1)
    lo = np.maximum(0, i - n)
    return (c[i] - c[lo]) / (i - lo)


def first_reach(flops: np.ndarray, loss: np.ndarray, target: float) -> float | None:
    """First FLOPs at which `loss` <= target (linear interpolation between logged rows), or None."""
    if target is None or flops.size == 0:
        return None
    tol = 1e-12 * max(1.0, abs(target))
    hit = np.nonzero(loss <= target + tol)[0]
    if hit.size == 0:
        return None
    i = int(hit[0])
    if i == 0:
        return float(flops[0])
    l0, l1, f0, f1 = loss[i - 1], loss[i], flops[i - 1], flops[i]
    frac = (l0 - target) / (l0 - l1) if l0 != l1 else 1.0
    return float(f0 + min(max(frac, 0.0), 1.0) * (f1 - f0))


def _curve(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    return (run.train_flops, run.smoothed) if metric == "train" else (run.val_flops, run.val_loss)


def _own_target(run: Run, metric: str) -> tuple[float | None, float | None]:
    """(final loss, FLOPs to first reach it) of a reference run's own curve."""
    f, loss = _curve(run, metric)
    if loss.size == 0:
        return None, None
    target = float(loss[-1])
    return target, first_reach(f, loss, target)


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return mean, std


def compare_to(ref: Configuration, conf: Configuration) -> dict:
    """Per-seed and aggregated FLOPs-to-target and savings of `conf` against `ref`'s final losses."""
    out: dict[str, Any] = {
        "label": conf.label,
        "run_kind": conf.run_kind,
        "reference": {"label": ref.label, "run_kind": ref.run_kind},
        "per_seed": [],
    }
    ref_by_seed: dict[Any, Run] = {}
    for r in ref.runs:
        ref_by_seed.setdefault(r.seed, r)
    own = {m: {id(r): _own_target(r, m) for r in ref.runs} for m in ("train", "val")}
    mean_ref = {}
    for m in ("train", "val"):
        pairs = [v for v in own[m].values() if v[0] is not None and v[1] is not None]
        mean_ref[m] = (
            (float(np.mean([p[0] for p in pairs])), float(np.mean([p[1] for p in pairs]))) if pairs else (None, None)
        )
    for run in conf.runs:
        ref_run = ref_by_seed.get(run.seed) if run.seed is not None else None
        entry: dict[str, Any] = {"seed": run.seed, "run": run.source, "paired": ref_run is not None}
        for m in ("train", "val"):
            target, f_ref = own[m][id(ref_run)] if ref_run is not None else mean_ref[m]
            f, loss = _curve(run, m)
            flops = first_reach(f, loss, target) if target is not None else None
            saving = 1.0 - flops / f_ref if (flops is not None and f_ref) else None
            entry[m] = {
                "target": target,
                "reference_flops": f_ref,
                "flops": flops,
                "reached": flops is not None,
                "saving": saving,
            }
            if target is None:
                entry[m]["note"] = f"reference has no {m} loss"
            elif loss.size == 0:
                entry[m]["note"] = f"no {m} loss rows"
        out["per_seed"].append(entry)
    for m in ("train", "val"):
        reached = [e[m] for e in out["per_seed"] if e[m]["reached"]]
        mf, sf = _stats([e["flops"] for e in reached])
        ms, ss = _stats([e["saving"] for e in reached if e["saving"] is not None])
        out[m] = {
            "n_runs": len(out["per_seed"]),
            "n_reached": len(reached),
            "mean_flops": mf,
            "std_flops": sf,
            "mean_saving": ms,
            "std_saving": ss,
        }
    return out


def choose_baseline(configs: list[Configuration], label: str | None) -> Configuration:
    if label is not None:
        matches = [c for c in configs if c.label == label]
        if len(matches) > 1:
            singles = [c for c in matches if c.run_kind == "single"]
            if len(singles) == 1:
                return singles[0]
            raise CompareError(
                f"--baseline {label!r} matches several configurations: {', '.join(c.name for c in matches)}"
            )
        if not matches:
            raise CompareError(f"no baseline found: no configuration labelled {label!r} (have: {_names(configs)})")
        return matches[0]
    singles = [c for c in configs if c.run_kind == "single"]
    if not singles:
        raise CompareError(
            f"no baseline found: no single-level runs (run_kind=single) among {_names(configs)}; "
            "pass --baseline LABEL"
        )
    if len(singles) > 1:
        raise CompareError(
            f"several single-level configurations ({'; '.join(c.label for c in singles)}); "
            "choose one with --baseline LABEL"
        )
    return singles[0]


def _names(configs: Iterable[Configuration]) -> str:
    return "; ".join(c.name for c in configs) or "nothing"


def _strip_control(label: str) -> str:
    parts = [p for p in label.split(",") if not p.startswith("multilevel.control=")]
    return ",".join(parts) or "default"


def match_control(conf: Configuration, controls: list[Configuration], label: str | None) -> tuple[Configuration | None, str]:
    if label is not None:
        hits = [c for c in controls if c.label == label]
        return (hits[0], "--control") if hits else (None, "")
    exact = [c for c in controls if _strip_control(c.label) == conf.label]
    if len(exact) == 1:
        return exact[0], "same label + multilevel.control=schedule"
    if len(controls) == 1:
        return controls[0], "the only schedule control"
    return None, ""


def build_report(configs: list[Configuration], baseline: Configuration, control_label: str | None = None) -> dict:
    vs_baseline = [compare_to(baseline, c) for c in configs if c is not baseline]
    controls = [c for c in configs if c.run_kind == "schedule_control" and c is not baseline]
    if control_label is not None and not any(c.label == control_label for c in controls):
        raise CompareError(f"--control {control_label!r}: no schedule_control configuration with that label")
    vs_control = []
    for c in configs:
        if c.run_kind != "multilevel" or c is baseline:
            continue
        ctrl, why = match_control(c, controls, control_label)
        if ctrl is not None:
            entry = compare_to(ctrl, c)
            entry["reference"]["matched_by"] = why
            vs_control.append(entry)
    configurations = []
    for c in configs:
        runs = []
        for r in c.runs:
            runs.append(
                {
                    "seed": r.seed,
                    "run": r.source,
                    "final_train_loss_smoothed": float(r.smoothed[-1]) if r.smoothed.size else None,
                    "final_val_loss": float(r.val_loss[-1]) if r.val_loss.size else None,
                    "total_flops": _total_flops(r),
                }
            )
        configurations.append(
            {
                "label": c.label,
                "run_kind": c.run_kind,
                "n_seeds": len(c.runs),
                "seeds": c.seeds,
                "is_baseline": c is baseline,
                "runs": runs,
            }
        )
    return {
        "baseline": {"label": baseline.label, "run_kind": baseline.run_kind, "seeds": baseline.seeds},
        "configurations": configurations,
        "vs_baseline": vs_baseline,
        "vs_control": vs_control,
    }


def _total_flops(r: Run) -> float | None:
    v = r.summary.get("total_flops")
    if _finite(v):
        return float(v)
    ends = [a[-1] for a in (r.train_flops, r.val_flops) if a.size]
    return float(max(ends)) if ends else None


# ---------------------------------------------------------------------------------------------
# Output


def _fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _fmt_pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _fmt_loss(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def _pm(mean: float | None, std: float | None, fmt) -> str:
    if mean is None:
        return "—"
    return fmt(mean) + ("" if std is None else f" ± {fmt(std)}")


def _cell(e: dict) -> tuple[str, str]:
    if e["target"] is None:
        return "no target", "—"
    if not e["reached"]:
        return "not reached", "—"
    return _fmt_flops(e["flops"]), _fmt_pct(e["saving"])


def _md_table(entries: list[dict]) -> list[str]:
    lines = [
        "| configuration | seed | train: FLOPs to target | train: saving | val: FLOPs to target | val: saving |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        name = f"`{e['label']}` ({e['run_kind']})"
        for i, s in enumerate(e["per_seed"]):
            tf, ts = _cell(s["train"])
            vf, vs = _cell(s["val"])
            seed = f"{s['seed']}" + ("" if s["paired"] else "*")
            lines.append(f"| {name if i == 0 else ''} | {seed} | {tf} | {ts} | {vf} | {vs} |")
        cells = []
        for m in ("train", "val"):
            a = e[m]
            reached = f" ({a['n_reached']}/{a['n_runs']} reached)"
            cells.append(_pm(a["mean_flops"], a["std_flops"], _fmt_flops) + reached)
            cells.append(_pm(a["mean_saving"], a["std_saving"], _fmt_pct))
        lines.append(f"| | **mean ± std** | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    return lines


def render_markdown(report: dict) -> str:
    smooth = report["smooth"]
    b = report["baseline"]
    lines = [
        "# mltrain comparison: loss vs FLOPs",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Train loss: fine-model (level 0) rows, trailing moving average over the last {smooth} rows. "
        "Val loss: as logged. Target = the reference's final loss; FLOPs to target = first FLOPs at which "
        "a run reaches it (linear interpolation between logged rows); saving = 1 − F / F_ref, F_ref = FLOPs "
        "the reference needed to reach its own final loss. Runs are paired with the reference run of the "
        "same seed; `*` = no such seed, compared with the reference's mean target and mean F_ref. "
        "Mean ± sample std over the seeds that reached the target.",
        "",
        "## Configurations",
        "",
        "| configuration | kind | seeds | final train loss (smoothed) | final val loss | total FLOPs |",
        "|---|---|---|---|---|---|",
    ]
    for c in report["configurations"]:
        ft = _stats([r["final_train_loss_smoothed"] for r in c["runs"] if r["final_train_loss_smoothed"] is not None])
        fv = _stats([r["final_val_loss"] for r in c["runs"] if r["final_val_loss"] is not None])
        fl = _stats([r["total_flops"] for r in c["runs"] if r["total_flops"] is not None])
        mark = " **(baseline)**" if c["is_baseline"] else ""
        seeds = ", ".join(map(str, c["seeds"]))
        lines.append(
            f"| `{c['label']}`{mark} | {c['run_kind']} | {c['n_seeds']} ({seeds}) | {_pm(*ft, _fmt_loss)} "
            f"| {_pm(*fv, _fmt_loss)} | {_pm(*fl, _fmt_flops)} |"
        )
    lines += ["", f"## vs single-level baseline `{b['label']}` ({b['run_kind']})", ""]
    lines += _md_table(report["vs_baseline"]) if report["vs_baseline"] else ["(no other configuration)"]
    if report["vs_control"]:
        by_ref: dict[tuple, list] = {}
        for e in report["vs_control"]:
            by_ref.setdefault((e["reference"]["label"], e["reference"]["run_kind"]), []).append(e)
        for (label, kind), entries in by_ref.items():
            lines += ["", f"## vs schedule control `{label}` ({kind})", ""]
            lines += _md_table(entries)
    lines += ["", f"Plot: `{report['outputs']['png']}`", ""]
    return "\n".join(lines)


def _band(runs: list[Run], metric: str, logx: bool, n: int = 200):
    """(grid, mean, min, max) of the runs' curves on a common FLOPs grid (their overlap), or None."""
    curves = []
    for r in runs:
        f, loss = _curve(r, metric)
        if logx:
            f, loss = f[f > 0], loss[f > 0]
        if f.size:
            curves.append((f, loss))
    if not curves:
        return None
    if len(curves) == 1:
        f, loss = curves[0]
        return f, loss, loss, loss
    lo = max(f[0] for f, _ in curves)
    hi = min(f[-1] for f, _ in curves)
    if not hi > lo:
        return None
    grid = np.geomspace(lo, hi, n) if logx else np.linspace(lo, hi, n)
    ys = np.stack([np.interp(grid, f, loss) for f, loss in curves])
    return grid, ys.mean(0), ys.min(0), ys.max(0)


def _short_labels(configs: list[Configuration]) -> tuple[dict, list[str]]:
    """Legend names: each label minus the overrides every configuration shares (listed once instead)."""
    parts = {c.key: [p for p in c.label.split(",") if p and c.label != "default"] for c in configs}
    common = set.intersection(*(set(v) for v in parts.values())) if len(configs) > 1 else set()
    short = {k: ",".join(p for p in v if p not in common) or "default" for k, v in parts.items()}
    return short, sorted(common)


def plot(configs: list[Configuration], baseline: Configuration, report: dict, path: Path, logx: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    titles = {
        "train": f"train loss (fine model, moving average of {report['smooth']} rows)",
        "val": "validation loss (fine model)",
    }
    others = iter(colors)
    short, common = _short_labels(configs)
    for c in configs:
        color = "black" if c is baseline else next(others, None)
        if color is None:
            others = iter(colors)
            color = next(others)
        legend = f"{short[c.key]} [{c.run_kind}] (n={len(c.runs)})"
        if len(legend) > 70:
            legend = legend[:67] + "..."
        for ax, m in zip(axes, ("train", "val")):
            band = _band(c.runs, m, logx)
            if band is not None:
                x, mean, lo, hi = band
                ax.plot(x, mean, color=color, label=legend, lw=1.6 if c is baseline else 1.3)
                if len(c.runs) > 1:
                    ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
            else:  # seeds without a common FLOPs range: one thin line each
                for i, r in enumerate(c.runs):
                    f, l = _curve(r, m)
                    ax.plot(f, l, color=color, lw=0.8, label=legend if i == 0 else None)
    for ax, m in zip(axes, ("train", "val")):
        targets = [_own_target(r, m)[0] for r in baseline.runs]
        targets = [t for t in targets if t is not None]
        if targets:
            ax.axhline(float(np.mean(targets)), color="black", ls=":", lw=0.8, label="baseline final loss")
        ax.set_title(titles[m], fontsize=10)
        ax.set_xlabel("training FLOPs")
        ax.set_ylabel("loss")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")
    if common:
        text = "all runs: " + ",".join(common)
        fig.suptitle(text if len(text) <= 160 else text[:157] + "...", fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# W&B source


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
        first = first_line(err)
        raise CompareError(f"W&B: cannot list runs of {path!r} ({type(err).__name__}: {first})") from None
    runs = []
    for wr in wruns:
        try:
            summary = {k: wr.summary[k] for k in wr.summary.keys() if not str(k).startswith("_")}
            if not summary.get("run_kind"):
                log.warning("W&B run %s has no run_kind in its summary (crashed or not mltrain); skipped", wr.path)
                continue
            rows = list(wr.scan_history(keys=["flops", "train/loss", "level"], page_size=10000))
            if not rows:  # older runs without `level` on train rows: all fine level
                rows = list(wr.scan_history(keys=["flops", "train/loss"], page_size=10000))
            rows += list(wr.scan_history(keys=["flops", "val/loss"], page_size=10000))
            rows.sort(key=lambda r: r.get("_step", 0))
        except Exception as err:  # noqa: BLE001
            first = first_line(err)
            raise CompareError(f"W&B: cannot read run {'/'.join(wr.path)} ({type(err).__name__}: {first})") from None
        run_kind = str(summary["run_kind"])
        label = summary.get("label") or wr.group or "default"
        seed = summary.get("seed", (wr.config or {}).get("seed"))
        tf, tl, vf, vl = curves_from_rows(rows)
        runs.append(Run(f"wandb:{'/'.join(wr.path)}", str(label), run_kind, seed, summary, tf, tl, vf, vl))
    return runs


# ---------------------------------------------------------------------------------------------
# CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mltrain-compare",
        description="Compare multilevel runs with single-level training in loss vs FLOPs.",
    )
    p.add_argument("paths", nargs="*", help="run directories and/or sweep folders (searched recursively)")
    p.add_argument("--out", help="output folder (default: the common parent of the paths; cwd with --wandb)")
    p.add_argument("--smooth", type=int, default=10, metavar="N",
                   help="train loss: trailing moving average over the last N fine-level rows (default 10; 1 = raw)")
    p.add_argument("--baseline", metavar="LABEL", help="label of the reference configuration "
                   "(default: the only run_kind=single configuration)")
    p.add_argument("--control", metavar="LABEL", help="label of the schedule-control configuration "
                   "(default: matched by label, or the only one)")
    p.add_argument("--logx", action="store_true", help="log-scale FLOPs axis")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read runs from the W&B API instead of folders")
    p.add_argument("--group", help="--wandb: only runs of this W&B group")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="--wandb: extra API filter, e.g. state=finished or config.seed=1 (repeatable)")
    return p


def _default_out(paths: list[str]) -> Path:
    absolute = [os.path.abspath(p) for p in paths]
    common = Path(os.path.commonpath(absolute)) if len(absolute) > 1 else Path(absolute[0])
    if not common.is_dir():
        common = common.parent
    if (common / SUMMARY).exists() and (common / METRICS).exists() and len(paths) > 1:
        common = common.parent
    return common


def run_compare(args: argparse.Namespace, argv: Sequence[str]) -> str:
    if args.smooth < 1:
        raise CompareError(f"--smooth {args.smooth}: must be >= 1")
    if args.wandb:
        if args.paths:
            raise CompareError("give run folders or --wandb, not both")
        runs = load_wandb_runs(args.wandb, args.group, args.filter)
        if not runs:
            raise CompareError(f"no mltrain runs found in W&B project {args.wandb!r}")
        out = Path(args.out) if args.out else Path.cwd()
    else:
        if not args.paths:
            raise CompareError("give run/sweep directories, or --wandb ENTITY/PROJECT")
        dirs = find_run_dirs(args.paths)
        if not dirs:
            raise CompareError(
                f"no run directories (folders with {SUMMARY} and {METRICS}) found under: {', '.join(args.paths)}"
            )
        runs = [load_run_dir(d) for d in dirs]
        out = Path(args.out) if args.out else _default_out(args.paths)
    for r in runs:
        r.smoothed = moving_average(r.train_loss, args.smooth)
    configs = group_runs(runs)
    baseline = choose_baseline(configs, args.baseline)
    report = build_report(configs, baseline, args.control)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(shlex.quote(a) for a in ["mltrain-compare", *argv]),
        "smooth": args.smooth,
        "smoothing": f"trailing moving average over the last {args.smooth} level-0 train rows",
        "pairing": "by seed; a seed the reference lacks uses the reference's mean target and mean F_ref",
        "std": "sample std (ddof=1) over seeds that reached the target; null with fewer than 2",
        **report,
        "outputs": {k: str(out / f"comparison.{k}") for k in ("png", "md", "json")},
    }
    plot(configs, baseline, report, out / "comparison.png", args.logx)
    md = render_markdown(report)
    (out / "comparison.md").write_text(md, encoding="utf-8")
    write_json_atomic(out / "comparison.json", report)
    return md


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    try:
        md = run_compare(args, argv)
    except CompareError as err:
        print(f"mltrain-compare: error: {err}", file=sys.stderr)
        return 1
    print(md)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
