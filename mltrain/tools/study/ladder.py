"""Stage 4, the ladder report: does an arm's saving survive along the ladder's axis?

From each rung's verdict (mltrain-compare's typed `Report`) it builds the `Ladder` of `Rung`s and
`Trend`s (rungs.py) and writes `ladder.md`, `ladder.json` and `ladder.png`: per
rung and arm the tuned settings, the compute multiplier M and the saving 1 - 1/M with their intervals,
tokens per parameter; the multiplier against the study's `ladder_axis` (parameters, depth, width or
tokens per parameter: each rung's value read from its composed config); and per arm the trend along
that axis.

The trend is the slope b of log M = a + b log x over the rungs (x: the rung's value on the axis), each
rung at its headline M (compare's: interpolated on the frontier's points inside its data, else fitted),
by weighted least squares: a rung weighs 1 / its variance, its headline's standard error of log M
(a fitted reading adds its fit's own error, uniform within ±band, as a systematic). When the rungs
scatter about the line more than their errors allow, the covariance is widened by the Birge ratio
max(1, chi-square / (k − 2)); the interval is b ± t · se, t at the Satterthwaite degrees of freedom of
the rungs' variances (seeds − 1 each) and of the excess scatter (k − 2). Every piece moves continuously
with the rungs' M: a small change of one rung moves the interval a little, never across a threshold of
the method itself. Beside the slope: the first-to-last contrast log M_last − log M_first with its
interval, and each step between neighbouring rungs, "up" / "down" where it is at least twice its
standard error, else "unresolved". A rung whose M is only a bound ("M > x") or whose interval's upper
end is unbounded is no point for the slope (listed in `excluded`). In one sentence:

* flat: the whole interval lies within +-FLAT_SLOPE (M changes by less than ~3.5% per doubling of x);
* growing / shrinking: the interval lies above / below zero AND no step goes the other way (resolved);
* cannot tell: anything else (the slope is shown);
* too few scales / seeds to tell: fewer than MIN_SCALES_FOR_TREND rungs with a multiplier measured on
  at least MIN_SEEDS_FOR_TREND evaluation seeds. Two rungs always lie on a line, so nothing would
  check the straight line the slope assumes; and with fewer than 4 seeds a rung's interval rests on
  too little to weigh it by.

A prediction at a larger size (`predict_params`, parameters ladders only) is the fitted line carried
beyond the ladder, with its interval, and is always printed as an extrapolation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from mltrain.core import guarded
from mltrain.tools.compare import MIN_SEEDS_FOR_INTERVAL, Arm, FitError, Multiplier, Report, markdown_safe
from mltrain.tools.study.axes import AXES  # how the report and the plot name each axis
from mltrain.tools.study.ladder_md import params_text, render_ladder
from mltrain.tools.study.plan import label_parts
from mltrain.tools.study.rungs import ExcludedRung, Ladder, Prediction, Rung, RungArm, RungTuning, Step, Trend

FLAT_SLOPE = 0.05
Z95 = 1.959963984540054
MIN_SCALES_FOR_TREND = 3
MIN_SEEDS_FOR_TREND = MIN_SEEDS_FOR_INTERVAL


@dataclass
class ScaleResult:
    """One rung of the ladder, as stage 3 left it."""

    name: str
    n_params: int
    max_steps: int
    tokens_per_param: float
    labels: dict[str, str]  # arm -> the label mltrain-compare gives it
    kinds: dict[str, str] = field(default_factory=dict)  # arm -> its runs' kind
    comparison: Optional[Report] = None  # mltrain-compare's verdict; None when there is none
    why_no_verdict: Optional[str] = None
    missing: list[str] = field(default_factory=list)  # runs that did not end: "name: why"
    axis_value: Optional[float] = None  # the rung's value on the study's ladder_axis (None: its parameters)

    @property
    def x(self) -> float:
        return float(self.axis_value if self.axis_value is not None else self.n_params)

    def arm(self, arm: str) -> Optional[Arm]:
        """The verdict's arm for a study arm."""
        arms = self.comparison.arms if self.comparison is not None else ()
        return find_arm(arms, self.labels.get(arm, ""), self.kinds.get(arm, ""))

    @property
    def fit_error(self) -> Optional[FitError]:
        return self.comparison.frontier.fit_error if self.comparison is not None else None


def find_arm(arms: Sequence[Arm], label: str, kind: str) -> Optional[Arm]:
    """The arm of mltrain-compare's verdict with this label: the same text, or the same overrides once
    the keys mltrain's labels leave out are left out of both."""
    same = [a for a in arms if a.label == label]
    if not same:
        parts = label_parts(label, kind)
        same = [a for a in arms if label_parts(a.label, a.run_kind or kind) == parts]
    return same[0] if len(same) == 1 else None


# ---------------------------------------------------------------------------------------------
# The trend


@dataclass(frozen=True)
class RungPoint:
    """One rung as a point of the trend: x, log M (the headline's), its statistical standard error with
    the degrees of freedom it was estimated on, and the systematic standard error of a fitted reading."""

    x: float
    y: float
    se: float
    dof: float
    systematic: float = 0.0

    @property
    def var(self) -> float:
        return self.se ** 2 + self.systematic ** 2


def _why_not_a_point(m: Multiplier, seeds: int) -> Optional[str]:
    """Why a rung's multiplier is no point for the slope, or None when it is one."""
    head = m.led_by()
    if m.bound is not None:
        return f"M only bounded (M > {m.bound.value:.3g})"
    if head.M is None or not head.M > 0:
        return "no multiplier"
    if head.M_hi_unbounded:
        return "its interval's upper end is unbounded"
    if seeds < MIN_SEEDS_FOR_TREND:
        return f"fewer than {MIN_SEEDS_FOR_TREND} evaluation seeds"
    if head.M_lo is None or head.M_hi is None:
        return "no interval"
    return None


def rung_point(x: float, m: Multiplier, seeds: int, fit_error: Optional[FitError]) -> RungPoint:
    """The rung's headline log M and its errors: the headline's own standard error and degrees of freedom
    (an older report's: its interval's half-width over the normal quantile, seeds − 1 df); a fitted
    reading (joint, per run) adds its fit's own error as a systematic, uniform within ±band (sd band/√3)."""
    head = m.led_by()
    if head.M is None or head.M_lo is None or head.M_hi is None:  # _why_not_a_point leaves such a rung out
        raise ValueError(f"rung at {x:g}: a headline M without its interval is no point of the trend")
    se, dof = head.log_se, head.dof
    if se is None:
        se, dof = (math.log(head.M_hi) - math.log(head.M_lo)) / (2 * Z95), max(seeds - 1, 1)
    band = fit_error.band if fit_error is not None and head.kind in ("joint", "per_run") else None
    return RungPoint(x, math.log(head.M), max(se, 1e-12), float(dof or max(seeds - 1, 1)),
                     band / math.sqrt(3) if band else 0.0)


def _satterthwaite(parts: list[tuple[float, Optional[float]]]) -> float:
    """The degrees of freedom of a sum of variances, each (variance, its df); a part with df None: exact."""
    total = sum(v for v, _ in parts)
    den = sum(v ** 2 / d for v, d in parts if d and math.isfinite(d))
    return total ** 2 / den if den > 0 else math.inf


def _quantile(dof: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, dof)) if math.isfinite(dof) else Z95


def steps(points: list[RungPoint]) -> tuple[Step, ...]:
    """Each neighbouring pair: up / down where the change in log M is at least twice its standard error,
    else unresolved (not flat: the rungs cannot tell that far)."""
    out = []
    for a, b in zip(points, points[1:]):
        diff, se = b.y - a.y, math.sqrt(a.var + b.var)
        word = "up" if diff >= 2 * se else ("down" if diff <= -2 * se else "unresolved")
        out.append(Step(a.x, b.x, diff, se, word))
    return tuple(out)


def contrast(points: list[RungPoint]) -> tuple[float, float, float]:
    """(log M_last − log M_first, its interval): independent rungs, t at the Satterthwaite df."""
    a, b = points[0], points[-1]
    diff, var = b.y - a.y, a.var + b.var
    q = _quantile(_satterthwaite([(a.se ** 2, a.dof), (b.se ** 2, b.dof), (a.systematic ** 2 + b.systematic ** 2, None)]))
    return diff, diff - q * math.sqrt(var), diff + q * math.sqrt(var)


@dataclass(frozen=True)
class Line:
    """The trend's fitted line: intercept a, slope b, their covariance (widened), the reduced chi-square
    and the Birge ratio's square that widened it, the t quantile's df and the quantile, log x."""

    a: float
    b: float
    cov: np.ndarray
    chi2: Optional[float]
    ratio: float
    dof: float
    q: float
    x: np.ndarray


def weighted_line(points: list[RungPoint]) -> Line:
    """The weighted least-squares line of log M on log x (weights 1 / the rungs' variances), its
    covariance widened by the Birge ratio max(1, √(χ²/(k − 2))), and the t quantile at the Satterthwaite
    df of the rungs' variances (their seeds − 1 each) and the excess scatter (k − 2): every piece moves
    continuously with the rungs' M, so a small change of one cannot jump the interval."""
    x = np.log([p.x for p in points])
    y = np.array([p.y for p in points])
    w = 1 / np.array([p.var for p in points])
    design = np.stack([np.ones_like(x), x], axis=1)
    base = np.linalg.inv(design.T @ (w[:, None] * design))  # (XᵀWX)⁻¹
    a, b = base @ design.T @ (w * y)
    k = len(points)
    chi2 = float(np.sum(w * (y - a - b * x) ** 2))
    ratio = max(1.0, chi2 / (k - 2)) if k > 2 else 1.0
    c = (base @ design.T * w)[1]  # the slope as a weighted sum of the rungs' log M
    stat = [(float(ci ** 2 * p.se ** 2), p.dof) for ci, p in zip(c, points)]
    sys = float(sum(ci ** 2 * p.systematic ** 2 for ci, p in zip(c, points)))
    v0 = float(base[1, 1])
    dof = _satterthwaite(stat + [(sys, None), ((ratio - 1) * v0, k - 2)])
    return Line(float(a), float(b), base * ratio, chi2 / (k - 2) if k > 2 else None, ratio, dof, _quantile(dof), x)


def _monotone(found: tuple[Step, ...]) -> Optional[str]:
    """growing: no step down and one up at least; shrinking the same way down; else None."""
    words = {s.word for s in found}
    if "down" not in words and "up" in words:
        return "growing"
    if "up" not in words and "down" in words:
        return "shrinking"
    return None


def _too_few(usable: list, measured: list, excluded: tuple) -> Trend:
    few_seeds = len(measured) - len(usable)
    word = "too few seeds to tell" if few_seeds and len(measured) >= MIN_SCALES_FOR_TREND else "too few scales to tell"
    why = (f"a multiplier at {len(measured)} scale(s)"
           + (f", {few_seeds} of them on fewer than {MIN_SEEDS_FOR_TREND} evaluation seeds" if few_seeds else "")
           + f"; a trend needs {MIN_SCALES_FOR_TREND} scales with {MIN_SEEDS_FOR_TREND} seeds or more each "
           "(two scales always lie on a line; fewer seeds give no interval to weigh a scale by)")
    return Trend(arm="", verdict=word, n_scales=len(usable), excluded=excluded, why=why)


def fit_trend(points: list[tuple]) -> Trend:
    """Slope of log M against log x from (x, Multiplier, evaluation seeds[, FitError]) points
    (see the module docstring); the trend without its arm, sentence and predictions."""
    points = [(*p, None)[:4] for p in points]
    measured = [p for p in points if _why_not_a_point(p[1], MIN_SEEDS_FOR_TREND) is None]
    usable = [p for p in measured if p[2] >= MIN_SEEDS_FOR_TREND]
    excluded = tuple(ExcludedRung(p[0], w) for p in points
                     if (w := _why_not_a_point(p[1], p[2])) and w != "no multiplier")
    if len(usable) < MIN_SCALES_FOR_TREND:
        return _too_few(usable, measured, excluded)
    rungs = sorted((rung_point(*p) for p in usable), key=lambda r: r.x)
    line = weighted_line(rungs)
    b, half = line.b, line.q * math.sqrt(float(line.cov[1, 1]))
    method = (f"weighted least squares on the rungs' headline log M (weights: 1 / their variance, a fitted reading's "
              f"fit error added), t with {line.dof:.1f} df (Satterthwaite)")
    if line.ratio > 1:
        method += f", widened by their scatter (reduced chi-square {line.chi2:.2f}, the Birge ratio)"
    found = steps(rungs)
    monotone = _monotone(found)
    diff, diff_lo, diff_hi = contrast(rungs)
    lo, hi = b - half, b + half
    return Trend(arm="", verdict=trend_word(lo, hi, found), n_scales=len(usable), excluded=excluded, slope=b,
                 slope_lo=lo, slope_hi=hi, intercept=line.a, cov=line.cov.tolist(), quantile=line.q, method=method,
                 n_min=float(np.exp(line.x.min())), n_max=float(np.exp(line.x.max())), monotone=monotone,
                 dof=line.dof if math.isfinite(line.dof) else None, contrast=diff, contrast_lo=diff_lo,
                 contrast_hi=diff_hi, steps=found)


def trend_word(lo: float, hi: float, found: Sequence[Step] = ()) -> str:
    """flat inside ±FLAT_SLOPE; growing / shrinking when the interval excludes zero and no step between
    neighbouring rungs goes the other way by twice its standard error or more; else cannot tell."""
    words = {s.word for s in found}
    if -FLAT_SLOPE <= lo and hi <= FLAT_SLOPE:
        return "flat"
    if lo > 0 and "down" not in words:
        return "growing"
    if hi < 0 and "up" not in words:
        return "shrinking"
    return "cannot tell"


def predict(trend: Trend, n_params: float) -> Optional[Prediction]:
    """M at `n_params` on the fitted line, with its interval (an extrapolation beyond the ladder)."""
    if trend.slope is None or trend.intercept is None or trend.quantile is None or trend.n_max is None:
        return None  # no fitted line (its fields are all set, or none)
    t = math.log(n_params)
    cov = np.array(trend.cov)
    y = trend.intercept + trend.slope * t
    half = trend.quantile * math.sqrt(float(np.array([1, t]) @ cov @ np.array([1, t])))
    return Prediction(n_params, math.exp(y), math.exp(y - half), math.exp(y + half), n_params / trend.n_max)


def trend_sentence(arm: str, trend: Trend, axis: str = "params") -> str:
    word, unit = AXES[axis].symbol, AXES[axis].unit
    along = "scale" if axis == "params" else word
    left = "; ".join(f"{axis_text(e.x, axis)}: {e.why}" for e in trend.excluded)
    if trend.slope is None or trend.n_min is None or trend.n_max is None:  # no fitted line (all set, or none)
        return (f"{arm}: {trend.verdict} how the compute multiplier changes with {along} ({trend.why}"
                + (f"; not used as points: {left}" if left else "") + ").")
    span = f"over {trend.n_scales} scales ({axis_text(trend.n_min, axis)} to {axis_text(trend.n_max, axis)} {unit})"
    slope = f"slope of log M against log {word} {trend.slope:+.3f} [{trend.slope_lo:+.3f}, {trend.slope_hi:+.3f}]"
    if trend.contrast is not None:
        slope += (f", first to last log M {trend.contrast:+.3f} [{trend.contrast_lo:+.3f}, {trend.contrast_hi:+.3f}]")
    span += f"; not used as points: {left}" if left else ""
    if trend.steps:
        span += "; steps " + ", ".join(f"{axis_text(s.x_from, axis)}→{axis_text(s.x_to, axis)} {s.word}"
                                       for s in trend.steps)
    if trend.verdict == "cannot tell":
        bumpy = " (the rungs' M do not move one way)" if not trend.monotone else ""
        return f"{arm}: cannot tell whether the compute multiplier changes with {along}: {slope} {span}{bumpy}."
    return f"{arm}: the compute multiplier is {trend.verdict} with {along}: {slope} {span}."


def axis_text(x: float, axis: str) -> str:
    return params_text(x) if axis == "params" else f"{x:g}"


# ---------------------------------------------------------------------------------------------
# The report


def rung(result: ScaleResult, arms: list[str], tuning: Optional[RungTuning] = None) -> Rung:
    """One scale of the ladder from what stage 3 left: each study arm's verdict there."""
    verdict = result.comparison
    return Rung(result.name, result.x, result.n_params, result.max_steps, result.tokens_per_param,
                tuple(RungArm(arm, result.labels.get(arm), result.arm(arm)) for arm in arms),
                "comparison.json" if verdict is not None else None,
                result.why_no_verdict, verdict.warnings if verdict else (), result.fit_error,
                verdict.optimistic if verdict else None, tuple(result.missing), tuning)


def ladder_report(study: str, arms: list[str], frontier: str, results: list[ScaleResult],
                  predict_params: list[float], axis: str = "params", tuning: Optional[dict[str, RungTuning]] = None
                  ) -> Ladder:
    """The ladder's numbers (what ladder.json holds); `tuning` (scale -> stage 1's record) when the study
    records one per rung."""
    trends = []
    for arm in arms:
        if arm == frontier:
            continue
        points = [(r.x, (a.multiplier or Multiplier(False)) if (a := r.arm(arm)) else Multiplier(False),
                   len(a.eval_seeds) if a else 0, r.fit_error) for r in results]
        trend = fit_trend(points)
        predictions = tuple(p for p in (predict(trend, n) for n in predict_params) if p) if axis == "params" else ()
        trends.append(replace(trend, arm=arm, sentence=trend_sentence(arm, trend, axis), predictions=predictions))
    rungs = tuple(rung(r, arms, (tuning or {}).get(r.name)) for r in results)
    return Ladder(study, axis, AXES[axis].title, frontier, FLAT_SLOPE, MIN_SCALES_FOR_TREND, MIN_SEEDS_FOR_TREND, rungs,
                  tuple(trends), with_tuning=tuning is not None)


def render_markdown(report: Ladder) -> str:
    """ladder.md from the ladder, by mltrain-compare's renderer (the one comparison.md has)."""
    return render_ladder(report, AXES[report.axis].symbol)


def plot_ladder(report: Ladder, path: Path, dpi: int = 120, root: Optional[Path] = None, kept: str = "") -> None:
    """The multiplier against the ladder's axis, per arm, with intervals and the fitted trend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(1.0, color="0.6", lw=1, ls=":", label="M = 1 (no saving)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, trend in enumerate(report.trends):
        color = colors[i % len(colors)]
        shift = 1.0 + 0.03 * (i - (len(report.trends) - 1) / 2)  # arms side by side, not on top
        for s in report.rungs:
            row = next((r.result for r in s.arms if r.arm == trend.arm), None)
            m = (row.multiplier if row is not None else None) or Multiplier(False)
            x = s.x * shift
            if m.bound is not None and m.bound.kind == "lower":  # only a bound: a caret at M > x, no point
                value = m.bound.value if m.bound.value is not None else math.nan  # None: nothing drawn, as before
                ax.plot([x], [value], marker="^", color=color, mfc="white", ls="none")
                continue
            head = m.led_by()
            if head.M is None or not head.M > 0:
                continue
            lo, hi = head.M_lo or head.M, head.M_hi or head.M  # no interval (too few seeds): a bare point
            ax.errorbar([x], [head.M], yerr=[[max(0.0, head.M - lo)], [max(0.0, hi - head.M)]], fmt="o",
                        color=color, mfc="white" if m.extrapolated and head.kind != "interpolated" else color,
                        capsize=3)
        if trend.slope is not None and trend.intercept is not None and trend.n_min is not None \
                and trend.n_max is not None:  # a fitted line (its fields are all set, or none)
            n = np.geomspace(trend.n_min, trend.n_max, 20)
            ax.plot(n, np.exp(trend.intercept + trend.slope * np.log(n)), color=color, ls="--", lw=1)
        ax.plot([], [], "o--", color=color, label=f"{trend.arm} ({trend.verdict})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if hi / lo < 10:  # a log axis ticks only 1, 2, ..., 9 x 10^k: a span like 0.8-1.5 would show 0.8, 0.9, 1 only
        ticks = [t for t in matplotlib.ticker.MaxNLocator(nbins=8).tick_values(lo, hi) if lo <= t <= hi and t > 0]
        ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    for set_formatter in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        set_formatter(ScalarFormatter())  # 1.2, not 1.2 x 10^0
    if report.axis != "params":  # the rungs' own values as the ticks: 4, 8, 12 blocks
        ax.set_xticks([s.x for s in report.rungs], [f"{s.x:g}" for s in report.rungs])
        ax.xaxis.set_minor_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axis = report.axis
    ax.set_xlabel(AXES[axis].title + " (log scale)")
    ax.set_ylabel("compute multiplier M (95% interval)")
    ax.set_title(f"{report.study}: multiplier vs {AXES[axis].symbol} (hollow: beyond the frontier's data; ^: M only "
                 "bounded below)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        guarded.write_figure(fig, path, root=root if root is not None else path.parent, dpi=dpi, kept=kept)
    finally:
        plt.close(fig)


def write_ladder(report: Ladder, base: Path, root: Optional[Path] = None) -> None:
    """ladder.json, ladder.md and ladder.png next to each other (`base` without a suffix), never
    through a link below `root` (the study's folder; mltrain/core/guarded.py); the plot last, so a full disk
    there leaves the numbers and the report written."""
    root = root if root is not None else base.parent
    paths = [base.with_suffix(s) for s in (".json", ".md", ".png")]
    guarded.refuse_linked(paths, root)
    guarded.write_json(paths[0], report.to_json(), root=root)
    guarded.write_text(paths[1], render_markdown(markdown_safe(report)), root=root)  # labels cannot break its tables
    plot_ladder(report, paths[2], root=root, kept=f"{paths[0].name} and {paths[1].name} were written")
