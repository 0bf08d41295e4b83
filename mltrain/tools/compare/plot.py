"""comparison.png: train and val loss against FLOPs (mean over seeds, min-max band) and, when there is a
frontier, a panel with its points, the fitted power law and each arm's kept setting beside it. The
legend sits below the panels, never over a curve; curves are named by their readable names."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from mltrain.method.kinds import RunKind
from mltrain.core import guarded
from mltrain.tools.compare.loading import Configuration, Run
from mltrain.tools.compare.results import Report

TITLES = {"val": "validation loss (fine model)"}
FRONTIER_TITLE = "final val loss vs total FLOPs: tuned frontier and each arm's kept setting"
LEGEND_COLUMNS = 3


def _band(runs: list[Run], metric: str, logx: bool, n: int = 200):
    """(grid, mean, min, max) of the runs' curves on a common FLOPs grid (their overlap), or None."""
    curves = []
    for r in runs:
        f, loss = r.curve(metric)
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


def _colors(configs: list[Configuration], baseline: Optional[Configuration], in_frontier: set, palette: list) -> dict:
    color_of, i = {}, 0
    for c in configs:
        if c is baseline or c.key in in_frontier:
            color_of[c.key] = "black"
        else:
            color_of[c.key] = palette[i % len(palette)]
            i += 1
    return color_of


def _curves(ax, c: Configuration, metric: str, color: str, legend: str, logx: bool, thick: bool) -> None:
    band = _band(c.runs, metric, logx)
    if band is not None:
        x, mean, lo, hi = band
        ax.plot(x, mean, color=color, label=legend, lw=1.6 if thick else 1.3)
        if len(c.runs) > 1:
            ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
    else:  # seeds without a common FLOPs range: one thin line each
        for j, r in enumerate(c.runs):
            f, loss = r.curve(metric)
            ax.plot(f, loss, color=color, lw=0.8, label=legend if j == 0 else None)


def plot(configs: list[Configuration], baseline: Optional[Configuration], report: Report, path: Path, logx: bool,
         dpi: int = 120) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frontier = report.frontier
    in_frontier = {(c.run_kind, c.label) for c in report.configurations if c.in_frontier}
    name = {(c.run_kind, c.label): c.name for c in report.configurations}
    panels = ["train", "val"] + (["frontier"] if frontier.points else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.6), layout="constrained")
    color_of = _colors(configs, baseline, in_frontier, plt.rcParams["axes.prop_cycle"].by_key()["color"])
    titles = {"train": f"train loss (fine model, moving average of {report.smooth} rows)", **TITLES}
    for c in configs:
        if c.run_kind == RunKind.single and c is not baseline:
            continue  # the other single-level settings and budgets are points of the frontier panel
        for ax, m in zip(axes, ("train", "val")):
            _curves(ax, c, m, color_of[c.key], f"{name[c.key]} (n={len(c.runs)})", logx, c is baseline)
    for ax, m in zip(axes, ("train", "val")):
        targets = [t for r in baseline.runs if (t := r.final(m)) is not None] if baseline else []
        if targets:
            ax.axhline(float(np.mean(targets)), color="black", ls=":", lw=0.8, label="baseline final loss")
        ax.set_title(titles[m], fontsize=10)
        ax.set_xlabel("training FLOPs")
        ax.set_ylabel("loss")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    if frontier.points:
        _frontier_panel(axes[2], report, color_of)
        axes[2].set_title(FRONTIER_TITLE, fontsize=9)
    handles, labels = {}, []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend([handles[k] for k in labels], labels, loc="outside lower center", fontsize=7,
               ncol=min(LEGEND_COLUMNS, max(1, len(labels))))
    common = ", ".join(f"{k}={v}" for k, v in (report.common_settings or {}).items())
    if common:
        fig.suptitle("all runs: " + (common if len(common) <= 160 else common[:157] + "..."), fontsize=8)
    try:
        guarded.write_figure(fig, path, root=Path(path).parent, dpi=dpi)  # never through a link
    finally:
        plt.close(fig)


def _frontier_panel(ax, report: Report, color_of: dict) -> None:
    frontier = report.frontier
    tried = [(np.mean([r.total_flops for r in c.runs]), np.mean([r.final_val_loss for r in c.runs]))
             for c in report.configurations if c.run_kind == RunKind.single
             and all(r.total_flops and r.final_val_loss is not None for r in c.runs)]
    if tried:
        ax.plot(*zip(*tried), ".", color="0.6", ms=4, label="single-level settings tried (mean over seeds)")
    pts = frontier.points
    ax.plot([p.flops for p in pts], [p.loss for p in pts], "o", color="black", ms=3.5,
            label="tuned frontier (per seed)")
    fit = frontier.fit
    xs = [p.flops for p in pts]
    for a in report.arms:
        xs += [r.flops for r in a.runs if r.flops] + [r.flops_eq for r in a.runs if r.flops_eq]
    # an available fit has its parameters (PowerLawFit: all set, or none)
    if fit is not None and fit.available and fit.E is not None and fit.A is not None and fit.alpha is not None:
        grid = np.geomspace(min(xs) / 1.2, max(xs) * 1.2, 200)
        ax.plot(grid, fit.E + fit.A * grid ** -fit.alpha, "--", color="black", lw=1,
                label=f"fit E + A·C^−α (α={fit.alpha:.3g})")
    for a in report.arms:
        points = [(r.flops, r.final_val_loss) for r in a.runs if r.flops and r.final_val_loss is not None]
        if not points:
            continue
        x = [f for f, _ in points]
        y = [loss for _, loss in points]
        mx, my = float(np.mean(x)), float(np.mean(y))
        # equal values over seeds: their mean can come out a rounding outside them, never a negative bar
        xerr = [[max(0.0, mx - min(x))], [max(0.0, max(x) - mx)]]
        yerr = [[max(0.0, my - min(y))], [max(0.0, max(y) - my)]]
        ax.errorbar([mx], [my], xerr=xerr, yerr=yerr,
                    fmt="s", color=color_of.get((a.run_kind, a.selected_label), "gray"), ms=5, capsize=2, lw=1, label=f"{a.name} (kept setting)")
    ax.set_xscale("log")
    ax.set_xlabel("total training FLOPs")
    ax.set_ylabel("final val loss")
    ax.grid(alpha=0.3, which="both")
