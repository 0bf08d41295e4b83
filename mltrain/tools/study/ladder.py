"""Stage 4, the ladder report: does an arm's saving survive along the ladder's axis?

From each rung's verdict (mltrain-compare's typed `Report`) it builds the `Ladder` of `Rung`s and
`Trend`s (the compare package's results) and writes `ladder.md`, `ladder.json` and `ladder.png`: per
rung and arm the tuned settings, the compute multiplier M and the saving 1 - 1/M with their intervals,
tokens per parameter; the multiplier against the study's `ladder_axis` (parameters, depth, width or
tokens per parameter: each rung's value read from its composed config); and per arm the trend along
that axis.

The trend is the slope b of log M = a + b log x over the rungs (x: the rung's value on the axis), from a
hierarchical bootstrap (TREND_DRAWS draws, numpy seed TREND_SEED): per draw, each rung's log M is one of
its own bootstrap draws (compare's: the rung's evaluation seeds resampled and its frontier refitted, so
every rung is refitted per draw; a rung without stored draws, a normal of its interval's width) plus an
offset uniform within that rung's fit-error band (a systematic), and the slope is fitted by least
squares; the interval is the draws' 2.5 and 97.5 percentiles. When the rungs scatter about the line
more than their draws allow (reduced chi-square > 1) the interval is widened by that scatter (the
Birge ratio, with Student's t for n - 2 degrees of freedom). A rung whose M is only a bound ("M > x")
or whose interval's upper end is unbounded is no point for the slope (listed in `excluded`). In one
sentence:

* flat: the whole interval lies within +-FLAT_SLOPE (M changes by less than ~3.5% per doubling of x);
* growing / shrinking: the interval lies above / below zero AND the rungs' M rise / fall at every step;
* cannot tell: anything else (the slope is shown);
* too few scales / seeds to tell: fewer than MIN_SCALES_FOR_TREND rungs with a multiplier measured on
  at least MIN_SEEDS_FOR_TREND evaluation seeds. Two rungs always lie on a line, so nothing would
  check the straight line the slope assumes; and with fewer than 4 seeds a rung's bootstrap interval
  is bounded by draws that repeat one seed (see compare's verdict), so its weight is no measurement.

A prediction at a larger size (`predict_params`, parameters ladders only) is the fitted line carried
beyond the ladder, with its interval, and is always printed as an extrapolation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from mltrain import guarded
from mltrain.tools.compare import (MIN_SEEDS_FOR_INTERVAL, Arm, ExcludedRung, FitError, Ladder, Multiplier, Prediction,
                                   Report, Rung, RungArm, RungTuning, Trend, markdown_safe, params_text, render_ladder)
from mltrain.tools.study.axes import AXES  # how the report and the plot name each axis
from mltrain.tools.study.plan import label_parts

FLAT_SLOPE = 0.05
Z95 = 1.959963984540054
MIN_SCALES_FOR_TREND = 3
MIN_SEEDS_FOR_TREND = MIN_SEEDS_FOR_INTERVAL
TREND_DRAWS = 2000
TREND_SEED = 0


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


def _sigma(m: Multiplier) -> Optional[float]:
    lo, hi = m.M_lo, m.M_hi
    if lo is None or hi is None or not lo > 0 or not hi > 0:
        return None
    return max((math.log(hi) - math.log(lo)) / (2 * Z95), 1e-12)


def _why_not_a_point(m: Multiplier, seeds: int) -> Optional[str]:
    """Why a rung's multiplier is no point for the slope, or None when it is one."""
    if not m.measured:
        return "no multiplier"
    if m.bound is not None:
        return f"M only bounded (M > {m.bound.value:.3g})"
    if m.M_hi_unbounded:
        return "its interval's upper end is unbounded"
    if seeds < MIN_SEEDS_FOR_TREND:
        return f"fewer than {MIN_SEEDS_FOR_TREND} evaluation seeds"
    return None


def _rung_draws(m: Multiplier, fit_error: Optional[FitError], rng: np.random.Generator) -> Optional[np.ndarray]:
    """TREND_DRAWS draws of one rung's log M: its own bootstrap draws (compare's, every draw a refit of the
    rung's frontier on resampled evaluation seeds) or, without them, a normal of its interval's width;
    plus a per-draw offset uniform within the rung's fit-error band (a systematic)."""
    own = [v for v in m.draws or () if v and v > 0]
    if own:
        y = np.log(rng.choice(own, TREND_DRAWS))
    elif _sigma(m) is not None:
        y = rng.normal(math.log(m.M), _sigma(m), TREND_DRAWS)
    else:
        return None
    band = fit_error.band if fit_error is not None else None
    return y + (rng.uniform(-band, band, TREND_DRAWS) if band else 0.0)


def _monotone(y: np.ndarray) -> Optional[str]:
    steps = np.diff(y)
    return "growing" if np.all(steps > 0) else ("shrinking" if np.all(steps < 0) else None)


def fit_trend(points: list[tuple]) -> Trend:
    """Slope of log M against log x from (x, Multiplier, evaluation seeds[, FitError]) points
    (see the module docstring); the trend without its arm, sentence and predictions."""
    from scipy import stats

    points = [(*p, None)[:4] for p in points]
    measured = [p for p in points if _why_not_a_point(p[1], MIN_SEEDS_FOR_TREND) is None]
    usable = [p for p in measured if p[2] >= MIN_SEEDS_FOR_TREND]
    excluded = tuple(ExcludedRung(p[0], w) for p in points
                     if (w := _why_not_a_point(p[1], p[2])) and w != "no multiplier")
    if len(usable) < MIN_SCALES_FOR_TREND:
        few_seeds = len(measured) - len(usable)
        word = "too few seeds to tell" if few_seeds and len(measured) >= MIN_SCALES_FOR_TREND else "too few scales to tell"
        why = (f"a multiplier at {len(measured)} scale(s)"
               + (f", {few_seeds} of them on fewer than {MIN_SEEDS_FOR_TREND} evaluation seeds" if few_seeds else "")
               + f"; a trend needs {MIN_SCALES_FOR_TREND} scales with {MIN_SEEDS_FOR_TREND} seeds or more each "
               "(two scales always lie on a line; fewer seeds give no interval to weigh a scale by)")
        return Trend("", word, n_scales=len(usable), excluded=excluded, why=why)
    usable.sort(key=lambda p: p[0])
    rng = np.random.default_rng(TREND_SEED)
    draws = [_rung_draws(m, err, rng) for _, m, _, err in usable]
    if any(d is None for d in draws):
        return Trend("", "cannot tell", n_scales=len(usable), excluded=excluded,
                     why="a scale without an interval or bootstrap draws")
    x, y = np.log([p[0] for p in usable]), np.log([p[1].M for p in usable])
    ys = np.stack(draws, axis=1)  # (draws, rungs)
    design = np.stack([np.ones_like(x), x], axis=1)
    coef = np.linalg.lstsq(design, ys.T, rcond=None)[0]  # (2, draws): intercept, slope per draw
    a, b = (float(v) for v in np.linalg.lstsq(design, y, rcond=None)[0])
    lo, hi = np.percentile(coef[1], [2.5, 97.5])
    scale, method = 1.0, "hierarchical bootstrap: the rungs' own draws and their fit-error bands, one slope per draw"
    dof = len(usable) - 2
    sd = ys.std(axis=0)
    if dof > 0 and np.all(sd > 0):
        chi2 = float(np.sum(((y - (a + b * x)) / sd) ** 2)) / dof
        if chi2 > 1:
            scale = math.sqrt(chi2) * float(stats.t.ppf(0.975, dof)) / Z95
            method += f", widened by their scatter (reduced chi-square {chi2:.2f}, t with {dof} df)"
    lo, hi = b - (b - float(lo)) * scale, b + (float(hi) - b) * scale
    cov = np.cov(coef) * scale ** 2
    monotone = _monotone(y)
    return Trend("", trend_word(lo, hi, monotone), n_scales=len(usable), excluded=excluded, slope=b, slope_lo=lo,
                 slope_hi=hi, intercept=a, cov=cov.tolist(), quantile=Z95, method=method, n_min=float(np.exp(x.min())),
                 n_max=float(np.exp(x.max())), n_draws=TREND_DRAWS, monotone=monotone)


def trend_word(lo: float, hi: float, monotone: Optional[str] = None) -> str:
    """flat inside ±FLAT_SLOPE; growing / shrinking only when the interval excludes zero and the rungs'
    M move that way at every step; else cannot tell."""
    if -FLAT_SLOPE <= lo and hi <= FLAT_SLOPE:
        return "flat"
    if lo > 0 and monotone == "growing":
        return "growing"
    if hi < 0 and monotone == "shrinking":
        return "shrinking"
    return "cannot tell"


def predict(trend: Trend, n_params: float) -> Optional[Prediction]:
    """M at `n_params` on the fitted line, with its interval (an extrapolation beyond the ladder)."""
    if trend.slope is None:
        return None
    t = math.log(n_params)
    cov = np.array(trend.cov)
    y = trend.intercept + trend.slope * t
    half = trend.quantile * math.sqrt(float(np.array([1, t]) @ cov @ np.array([1, t])))
    return Prediction(n_params, math.exp(y), math.exp(y - half), math.exp(y + half), n_params / trend.n_max)


def trend_sentence(arm: str, trend: Trend, axis: str = "params") -> str:
    word, unit = AXES[axis].symbol, AXES[axis].unit
    along = "scale" if axis == "params" else word
    left = "; ".join(f"{axis_text(e.x, axis)}: {e.why}" for e in trend.excluded)
    if trend.slope is None:
        return (f"{arm}: {trend.verdict} how the compute multiplier changes with {along} ({trend.why}"
                + (f"; not used as points: {left}" if left else "") + ").")
    span = f"over {trend.n_scales} scales ({axis_text(trend.n_min, axis)} to {axis_text(trend.n_max, axis)} {unit})"
    slope = f"slope of log M against log {word} {trend.slope:+.3f} [{trend.slope_lo:+.3f}, {trend.slope_hi:+.3f}]"
    span += f"; not used as points: {left}" if left else ""
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
                tuple(RungArm(arm, result.labels.get(arm), result.arm(arm)) for arm in arms), verdict is not None,
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
                ax.plot([x], [m.bound.value], marker="^", color=color, mfc="white", ls="none")
                continue
            if not m.available or not m.M:
                continue
            lo, hi = m.M_lo or m.M, m.M_hi or m.M  # no interval (too few seeds): a bare point
            ax.errorbar([x], [m.M], yerr=[[m.M - lo], [hi - m.M]], fmt="o",
                        color=color, mfc="white" if m.extrapolated else color, capsize=3)
        if trend.slope is not None:
            n = np.geomspace(trend.n_min, trend.n_max, 20)
            ax.plot(n, np.exp(trend.intercept + trend.slope * np.log(n)), color=color, ls="--", lw=1)
        ax.plot([], [], "o--", color=color, label=f"{trend.arm} ({trend.verdict})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(ScalarFormatter())  # 1.2, not 1.2 x 10^0
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
    through a link below `root` (the study's folder; mltrain/guarded.py); the plot last, so a full disk
    there leaves the numbers and the report written."""
    root = root if root is not None else base.parent
    paths = [base.with_suffix(s) for s in (".json", ".md", ".png")]
    guarded.refuse_linked(paths, root)
    guarded.write_json(paths[0], report.to_json(), root=root)
    guarded.write_text(paths[1], render_markdown(markdown_safe(report)), root=root)  # labels cannot break its tables
    plot_ladder(report, paths[2], root=root, kept=f"{paths[0].name} and {paths[1].name} were written")
