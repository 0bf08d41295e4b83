"""comparison.png: train and val loss against FLOPs (mean over seeds, min-max band), and, when there is
a budget frontier, the frontier with each configuration's final (FLOPs, val loss) beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mltrain.tools.compare.loading import Configuration, Run

TITLES = {"val": "validation loss (fine model)"}


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


def _short_labels(configs: list[Configuration]) -> tuple[dict, list[str]]:
    """Legend names: each label minus the overrides every configuration shares (listed once instead)."""
    parts = {c.key: [p for p in c.label.split(",") if p and c.label != "default"] for c in configs}
    common = set.intersection(*(set(v) for v in parts.values())) if len(configs) > 1 else set()
    short = {k: ",".join(p for p in v if p not in common) or "default" for k, v in parts.items()}
    return short, sorted(common)


def plot(configs: list[Configuration], baseline: Configuration, report: dict, path: Path, logx: bool,
         dpi: int = 120) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frontier = report.get("frontier")
    in_frontier = {(c["run_kind"], c["label"]) for c in report["configurations"] if c["in_frontier"]}
    panels = ["train", "val"] + (["frontier"] if frontier else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    titles = {"train": f"train loss (fine model, moving average of {report['smooth']} rows)", **TITLES,
              "frontier": "final val loss vs total FLOPs: budget frontier (black) and runs (mean, min-max)"}
    short, common = _short_labels(configs)
    color_of, i = {}, 0
    for c in configs:
        if c is baseline or c.key in in_frontier:
            color_of[c.key] = "black"
        else:
            color_of[c.key] = colors[i % len(colors)]
            i += 1
    for c in configs:
        color = color_of[c.key]
        legend = f"{short[c.key]} [{c.run_kind}] (n={len(c.runs)})"
        if len(legend) > 70:
            legend = legend[:67] + "..."
        if c.key in in_frontier and c is not baseline:
            continue  # the frontier's shorter budgets are drawn in their own panel
        for ax, m in zip(axes, ("train", "val")):
            band = _band(c.runs, m, logx)
            if band is not None:
                x, mean, lo, hi = band
                ax.plot(x, mean, color=color, label=legend, lw=1.6 if c is baseline else 1.3)
                if len(c.runs) > 1:
                    ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
            else:  # seeds without a common FLOPs range: one thin line each
                for j, r in enumerate(c.runs):
                    f, loss = r.curve(m)
                    ax.plot(f, loss, color=color, lw=0.8, label=legend if j == 0 else None)
    for ax, m in zip(axes, ("train", "val")):
        targets = [r.final(m) for r in baseline.runs if r.final(m) is not None]
        if targets:
            ax.axhline(float(np.mean(targets)), color="black", ls=":", lw=0.8, label="baseline final loss")
        ax.set_title(titles[m], fontsize=10)
        ax.set_xlabel("training FLOPs")
        ax.set_ylabel("loss")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")
    if frontier:
        _frontier_panel(axes[2], configs, frontier, in_frontier, color_of, short)
        axes[2].set_title(titles["frontier"], fontsize=9)
    if common:
        text = "all runs: " + ",".join(common)
        fig.suptitle(text if len(text) <= 160 else text[:157] + "...", fontsize=8)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _frontier_panel(ax, configs, frontier, in_frontier, color_of, short) -> None:
    env = frontier["mean_envelope"] or []
    pts = [(c["mean_flops"], c["mean_final_val_loss"], c["budget"]) for c in frontier["configurations"]
           if c["mean_flops"] is not None]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color="black", ms=4, label="single-level budgets (mean)")
    for f, loss, budget in pts:
        ax.annotate(f"{budget:g}", (f, loss), textcoords="offset points", xytext=(3, 3), fontsize=7)
    if env:
        ax.plot([p["flops"] for p in env], [p["final_val_loss"] for p in env], "-", color="black", lw=1.2,
                label="frontier (lower envelope)")
    for c in configs:
        if c.key in in_frontier:
            continue
        xs = [r.total_flops() for r in c.runs if r.total_flops() and r.final("val") is not None]
        ys = [r.final("val") for r in c.runs if r.total_flops() and r.final("val") is not None]
        if not xs:
            continue
        mx, my = float(np.mean(xs)), float(np.mean(ys))
        ax.errorbar([mx], [my], xerr=[[mx - min(xs)], [max(xs) - mx]], yerr=[[my - min(ys)], [max(ys) - my]],
                    fmt="s", color=color_of[c.key], ms=5, capsize=2, lw=1,
                    label=(f"{short[c.key]} [{c.run_kind}]")[:60])
    ax.set_xscale("log")
    ax.set_xlabel("total training FLOPs")
    ax.set_ylabel("final val loss")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right")
