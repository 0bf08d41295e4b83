"""Each arm's verdict, from its kept setting's runs on the evaluation seeds: the final held-out loss, the
compute multiplier read on the frontier's own points (`ondata`: interpolated inside the data, a bound
decided on the data beyond it), the multiplier on the fitted frontier (per run and joint, with a
calibrated bootstrap interval over seeds), and the same saving on a wall-clock axis.

Bootstrap: BOOTSTRAP_RESAMPLES draws of the evaluation seeds with replacement (numpy Generator seeded
with BOOTSTRAP_SEED, so a report is reproducible); each draw refits the frontier on the drawn seeds'
points and takes each arm's multiplier over its runs on the drawn seeds. The fit of a draw depends only
on the seeds drawn and how often, so each such multiset is fitted once. The interval is t-calibrated:
log M ± t(0.975, n − 1) · sd(log M over the draws) · sqrt(n / (n − 1)), n the arm's seeds (the
bootstrap's spread of a mean is sqrt((n − 1)/n) of the plain standard error, and its percentiles use the
normal's tails where n − 1 degrees of freedom call for Student's: at 4 seeds they undercover).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np
from scipy import stats

from mltrain.core.errors import CompareError
from mltrain.tools.compare.arms import Arm
from mltrain.tools.compare.frontier import Frontier, run_time
from mltrain.tools.compare.loading import Run
from mltrain.tools.compare.ondata import BEYOND_CONFIDENCE, read_on_data, run_on_data
from mltrain.tools.compare.powerlaw import MIN_POINTS, Fit, fit_power_law, fit_shift, fitted_law, read
from mltrain.tools.compare.results import (Bound, BudgetReading, DataReading, FitError, Headline, LossInterval,
                                          Multiplier, RunReading, Saving, WallclockSaving)
from mltrain.tools.compare.statistics import CONFIDENCE, FrontierPoint, frontier_flops, interval, interval_word
from mltrain.tools.compare.tables import Outside

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# With n seeds, a draw repeats one seed n times with probability n^(1-n): 11% at 3 seeds, so each 2.5%
# tail of the bootstrap would be such draws and the "interval" just the spread of single seeds; 1.6% at 4.
MIN_SEEDS_FOR_INTERVAL = 4
# More degenerate draws than one tail of the interval holds: its upper end is no number.
DEGENERATE_SHARE = (1 - CONFIDENCE) / 2
FIT_BAND_LIMIT = 0.05  # a fit whose own error is wider than ±5% in M: the frontier's points lead, not its curve


def loss_interval(runs: list[Run]) -> LossInterval:
    iv = interval([r.final("val") for r in runs])
    return LossInterval(iv.mean, iv.ci_low, iv.ci_high, iv.n)


def _measured(run: Run) -> tuple[float, float]:
    """A run's total FLOPs and final validation loss: what reading it on the frontier takes."""
    flops, loss = run.total_flops(), run.final("val")
    if flops is None or loss is None:
        raise CompareError(f"{run.source}: no total FLOPs or no final validation loss to read on the frontier")
    return flops, loss


def log_mean_multiplier(fit: Fit, runs: list[Run]) -> tuple[Optional[float], bool]:
    """(the mean log M of the runs on `fit`, whether the arm lies beyond the fit's data: its equal-loss
    point past the largest FLOPs fitted, or a run at or below the floor E)."""
    logs, unreachable = [], False
    for r in runs:
        reading = read(fit, *_measured(r))
        if reading.multiplier:
            logs.append(math.log(reading.multiplier))
        else:
            unreachable = True
    if not logs:
        return None, True
    log_m = float(np.mean(logs))
    log_c = float(np.mean([math.log(_measured(r)[0]) for r in runs]))
    _, (_, flops_max) = fitted_law(fit)
    return log_m, unreachable or log_m + log_c > math.log(flops_max) * (1 + 1e-12)


@dataclass
class Draws:
    """One arm's bootstrap: the multiplier of each draw that gave one (per-run reading and joint fit),
    and how many draws were degenerate (a fit at its bounds, no fit, or the arm beyond the draw's data)."""

    values: list = field(default_factory=list)
    joint: list = field(default_factory=list)
    degenerate: int = 0
    total: int = 0

    def add(self, other: "Draws") -> None:
        self.values += other.values
        self.joint += other.joint
        self.degenerate += other.degenerate
        self.total += other.total


def _joint(fit: Fit, frontier_pts: list, runs: list[Run], log_m0: float) -> Optional[float]:
    measured = [_measured(r) for r in runs]
    law, _ = fitted_law(fit)
    return fit_shift(([p.flops for p in frontier_pts], [p.loss for p in frontier_pts]),
                     ([f for f, _ in measured], [loss for _, loss in measured]), law, log_m0)


def _draw_arm(refit: Fit, pts: list, runs: list[Run], out: Draws) -> None:
    out.total += 1
    if not refit.available:
        out.degenerate += 1
        return
    log_m, beyond = log_mean_multiplier(refit, runs)
    out.degenerate += bool(beyond or refit.degenerate)
    if log_m is None:
        return
    out.values.append(math.exp(log_m))
    joint = _joint(refit, pts, runs, log_m)
    if joint is not None:
        out.joint.append(joint)


def bootstrap(frontier: Frontier, fit: Fit, arms: list[Arm]) -> tuple[dict[int, Draws], int]:
    """({id(arm): its draws}, how many draws gave a fit of the frontier)."""
    by_seed: dict[int, dict[Any, list[Run]]] = {id(a): {} for a in arms}
    for a in arms:
        for r in a.eval_runs:
            by_seed[id(a)].setdefault(r.seed, []).append(r)
    seeds = sorted({*frontier.per_seed, *(s for d in by_seed.values() for s in d)}, key=str)
    samples = {id(a): Draws() for a in arms}
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    # a draw's fits depend only on which seeds it drew, how often: few seeds, few fits
    refits: dict[tuple, Fit] = {}
    per_draw: dict[tuple, dict[int, Draws]] = {}
    fitted = 0
    for _ in range(BOOTSTRAP_RESAMPLES if len(seeds) >= MIN_SEEDS_FOR_INTERVAL else 0):
        draw = tuple(sorted(int(i) for i in rng.integers(0, len(seeds), len(seeds))))
        pts = [p for i in draw for p in frontier.per_seed.get(seeds[i], [])]
        if draw not in refits:
            refits[draw] = fit_power_law([p.flops for p in pts], [p.loss for p in pts], start=fit.law)
            per_draw[draw] = {}
            for a in arms:
                runs = [r for i in draw for r in by_seed[id(a)].get(seeds[i], [])]
                per_draw[draw][id(a)] = one = Draws()
                if runs:
                    _draw_arm(refits[draw], pts, runs, one)
        fitted += refits[draw].available
        for a in arms:
            samples[id(a)].add(per_draw[draw][id(a)])
    return samples, fitted


def _per_run(fit: Fit, runs: list[Run]) -> list[RunReading]:
    per_run = []
    for r in runs:
        reading = read(fit, *_measured(r)) if fit.available else None
        per_run.append(RunReading(r.seed, r.source, r.total_flops(), r.final("val"),
                                  reading.flops_eq if reading else None, reading.multiplier if reading else None,
                                  bool(reading and reading.extrapolated), reading.beyond_data if reading else None))
    return per_run


BEYOND_WHAT = (f"the arm's runs lie below the frontier's lowest loss with {BEYOND_CONFIDENCE:.1%} confidence (one-sided "
               "t on the loss gap, per run on its seed's envelope): M > the lower confidence limit of M, each run beyond "
               "counted at C_max / C_run")
DATA_ONLY_WHAT = ("some runs below the frontier's lowest loss, not all with confidence, and no fit to trust beyond "
                  "its data (none, or its own error unknown or wider than ±5%): M > the lower "
                  f"{BEYOND_CONFIDENCE:.1%} confidence limit of M from the frontier's points, each run beyond counted at "
                  "C_max / C_run (the least it can be)")


def calibrated(center: float, values: Sequence[float], n: int) -> tuple[float, float, float]:
    """(low, high, the standard error of log M) of the t-calibrated bootstrap interval around `center`:
    log center ± t(0.975, n − 1) · sd(log draws) · sqrt(n / (n − 1)), n the seeds resampled."""
    logs = np.log(np.asarray(values, dtype=float))
    se = float(logs.std(ddof=1)) * math.sqrt(n / (n - 1))
    q = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1))
    return math.exp(math.log(center) - q * se), math.exp(math.log(center) + q * se), se


def _intervals(m: Multiplier, draws: Draws, fitted: int, n_seeds: int) -> Multiplier:
    """M's (and the joint fit's) t-calibrated bootstrap interval; the upper end unbounded when too many
    draws are degenerate (DEGENERATE_SHARE)."""
    share = draws.degenerate / draws.total if draws.total else 0.0
    unbounded = share > DEGENERATE_SHARE
    warnings = list(m.warnings)
    m = replace(m, n_degenerate=draws.degenerate, degenerate_share=share,
                draws=tuple(float(f"{v:.6g}") for v in draws.values))  # the draws, kept in comparison.json (bootstrap_M)
    if len(draws.values) < BOOTSTRAP_RESAMPLES / 2:
        warnings.append(f"only {len(draws.values)} of {BOOTSTRAP_RESAMPLES} resamples gave a multiplier: no interval")
        return replace(m, warnings=tuple(warnings))
    if m.M is None:  # multiplier() hands over an M
        raise ValueError("a bootstrap interval needs the M it lies around")
    lo, hi, _ = calibrated(m.M, draws.values, n_seeds)
    m = replace(m, M_lo=lo, M_hi=None if unbounded else hi, saving_lo=1 - 1 / lo,
                saving_hi=None if unbounded else 1 - 1 / hi, M_hi_unbounded=unbounded)
    if len(draws.joint) >= BOOTSTRAP_RESAMPLES / 2 and m.M_joint is not None:
        jlo, jhi, _ = calibrated(m.M_joint, draws.joint, n_seeds)
        m = replace(m, M_joint_lo=jlo, M_joint_hi=None if unbounded else jhi, M_joint_hi_unbounded=unbounded)
    if unbounded:
        warnings.append(f"{draws.degenerate} of {draws.total} resamples degenerate (a fit at its bounds, "
                        f"or the arm beyond the draw's frontier data): the interval's upper end is unbounded")
    if fitted < BOOTSTRAP_RESAMPLES:
        warnings.append(f"{BOOTSTRAP_RESAMPLES - fitted} of {BOOTSTRAP_RESAMPLES} resamples gave no fit")
    return replace(m, warnings=tuple(warnings))


def multiplier(fit: Fit, runs: list[Run], draws: Draws, fitted: int,
               frontier_pts: Sequence[FrontierPoint] = ()) -> tuple[Multiplier, list[RunReading]]:
    """(the arm's multiplier on the fitted frontier with its interval and the joint fit; one reading per
    run). Whether the arm lies beyond the data is decided on the data (`on_data`), not here."""
    per_run = _per_run(fit, runs)
    if not fit.available:
        return Multiplier.unavailable(f"no fit of the frontier: {fit.why}"), per_run
    if not runs:
        return Multiplier.unavailable("no run on an evaluation seed"), per_run
    law, _ = fitted_law(fit)
    reached = [e for e in per_run if e.M]
    if not reached:
        return Multiplier.unavailable(f"every final loss is at or below the fitted floor E = {law.E:.4g}: "
                                      "no single-level compute reaches it"), per_run
    m = math.exp(float(np.mean([math.log(e.M) for e in reached if e.M])))  # each of `reached` has one
    beyond = [e.beyond_data for e in reached if e.beyond_data is not None]  # extrapolated: beyond_data set
    warnings = []
    if len(reached) < len(per_run):
        warnings.append(f"{len(per_run) - len(reached)} run(s) at or below the fitted floor E "
                        f"({law.E:.4g}) left out: the multiplier understates them")
    out = Multiplier(True, None, m, saving=1 - 1 / m, n=len(reached), n_resamples=len(draws.values),
                     M_joint=_joint(fit, list(frontier_pts), runs, math.log(m)) if frontier_pts else None,
                     extrapolated=bool(beyond), beyond_data=max(beyond) if beyond else None)
    n_seeds = len({e.seed for e in reached})
    if n_seeds < MIN_SEEDS_FOR_INTERVAL:
        warnings.append(f"fewer than {MIN_SEEDS_FOR_INTERVAL} evaluation seeds: no bootstrap interval")
        return replace(out, warnings=tuple(warnings)), per_run
    return _intervals(replace(out, warnings=tuple(warnings)), draws, fitted, n_seeds), per_run


def fit_error(fit: Fit, frontier: Frontier) -> FitError:
    """The fitted frontier read at its own points: per configuration and FLOPs point, M = C_eq / C of the
    frontier's points (geometric mean over the evaluation seeds, as an arm's M is). A perfect fit gives 1
    everywhere; the range is the fit's own error at its data, and an arm's M inside it is no saving or
    cost. Unknown with MIN_POINTS distinct FLOPs or fewer: three parameters pass through three points."""
    if not fit.available:
        return FitError(False, f"no fit of the frontier: {fit.why}")
    distinct = len({p.flops for p in frontier.points})
    if distinct <= MIN_POINTS:
        return FitError(False, f"unknown: the frontier has {distinct} distinct FLOPs, and a power law's three "
                               "parameters pass through three points whatever their error")
    config_of = {r.source: c for c in frontier.configs for r in c.runs}
    groups: dict[tuple, list[float]] = {}
    for p in frontier.points:
        reading = read(fit, p.flops, p.loss)
        c = config_of.get(p.source) if p.source is not None else None
        if reading.multiplier:
            key = (float(f"{p.flops:.6g}"), c.run_kind if c else "", c.label if c else "", p.budget)
            groups.setdefault(key, []).append(math.log(reading.multiplier))
    per = tuple(BudgetReading(budget, math.exp(float(np.mean(v))), len(v), flops, label or None, kind or None)
                for (flops, kind, label, budget), v in sorted(groups.items(), key=lambda kv: kv[0][:3]))
    if not per:
        return FitError(False, "no frontier point reads on its fit (every one at or below the fitted floor)")
    ms = [e.M for e in per]
    return FitError(True, None, per, min(ms), max(ms))


def on_data(frontier: Frontier, runs: list[Run]) -> tuple[DataReading, Optional[float]]:
    """The arm's M read on the frontier's points, each run on its seed's envelope (ondata.py), and the
    interpolated M: the geometric mean of F* / F_run over the runs inside the frontier (None: no run)."""
    if frontier.why is not None:
        return DataReading(None, frontier.why), None
    placed = [run_on_data(env, paired, r.seed, flops, loss) for r, env, paired, flops, loss in frontier.placed(runs)]
    logs = [r.log_m for r in placed if r.log_m is not None]
    return (read_on_data(placed, frontier.mean if len(frontier.mean) >= 2 else None),
            math.exp(float(np.mean(logs))) if logs else None)


def interpolated_saving(frontier: Frontier, runs: list[Run], x: Callable[[Run], Optional[float]]) -> Saving:
    """The saving 1 − x_run / x*, x* read on the frontier's points (linear in log x between them), over
    the runs; a run beyond the frontier's ends has only a bound and is left out (counted)."""
    if frontier.why is not None:
        return Saving(False, frontier.why, n_outside=Outside())
    values, unpaired, sides = [], 0, []
    for _, env, paired, cost, loss in frontier.placed(runs, x):
        reading = frontier_flops(env, loss)
        if reading.flops is None:
            sides.append(reading.side)
            continue
        values.append(1 - cost / reading.flops)
        unpaired += not paired
    outside = Outside(sides.count("below"), sides.count("above"))
    iv = interval(values, "no saving")
    if iv.n == 0:
        why = (f"every run is outside the frontier ({outside.below} below its longest budget, "
               f"{outside.above} above its shortest)" if outside.total else "no run to read")
        return Saving(False, why, n_outside=outside, n_unpaired=unpaired, warnings=iv.warnings)
    return Saving(True, None, iv.mean, iv.ci_low, iv.ci_high, iv.n, outside, unpaired, iv.warnings)


def _disagreement(m: Multiplier, m_interp: Optional[float], band: Optional[float]) -> tuple[bool, tuple[str, ...]]:
    """(whether the fitted M and the one read on the frontier's points differ by more than the fit's own
    error, the multiplier's warnings with that said)."""
    fitted = m.M_joint if m.M_joint is not None else m.M
    disagrees = bool(band is not None and fitted and m_interp and abs(math.log(fitted) - math.log(m_interp)) > band)
    if not disagrees or band is None:  # disagreeing takes a band
        return False, m.warnings
    return True, m.warnings + (f"the fitted M ({fitted:.3g}) and the one read on the frontier's points ({m_interp:.3g}) "
                               f"differ by more than the fit's own error (±{100 * (math.exp(band) - 1):.1f}%)",)


def _fitted_headline(kind: str, value: Optional[float], lo: Optional[float], hi: Optional[float], unbounded: bool,
                     n: int) -> Headline:
    """A fitted M's headline, with the standard error its calibrated interval implies (t at n − 1 df)."""
    se = None
    if lo is not None and hi is not None and n > 1:
        se = (math.log(hi) - math.log(lo)) / (2 * float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1)))
    return Headline(kind, value, lo, hi, unbounded, se, n - 1 if se is not None else None, n)


def _as_bound(m: Multiplier, value: Optional[float], what: str, n: int) -> Multiplier:
    return replace(m, bound=Bound("lower", value, what), M_hi=None, saving_hi=None, M_hi_unbounded=True,
                   M_joint_hi=None, M_joint_hi_unbounded=True, headline=Headline("bound", None, value, None, True, n=n))


def headline(m: Multiplier, data: DataReading, m_interp: Optional[float], error: FitError) -> Multiplier:
    """The multiplier with the M the report leads with (see docs/experiments.md): beyond the data with
    confidence, a bound (the lower confidence limit); every run inside the data, the interpolated M with
    its t interval; else (some runs outside) the fitted frontier's joint M, else its per-run M, when the
    fit's own error is known and within ±FIT_BAND_LIMIT; else, where runs lie below the frontier's lowest
    loss and none above its highest, the data-only bound; else the fitted M however wide its error. Also
    whether the fitted and interpolated readings disagree (beyond the fit's own error)."""
    disagrees, warnings = _disagreement(m, m_interp, error.band)
    m = replace(m, M_interpolated=m_interp, fit_disagrees=disagrees, warnings=warnings, on_data=data)
    if data.kind == "bound":
        return _as_bound(m, data.M_lo, BEYOND_WHAT, data.n)
    if data.kind == "interpolated":
        return replace(m, headline=Headline("interpolated", data.M, data.M_lo, data.M_hi, False, data.log_se, data.dof,
                                            data.n))
    trusted = error.band is not None and error.band <= math.log(1 + FIT_BAND_LIMIT)
    if m.available and not trusted and data.n_below and not data.n_above and data.lower_limit is not None:
        return _as_bound(m, data.lower_limit, DATA_ONLY_WHAT, data.n)
    if m.available and m.M_joint is not None:
        return replace(m, headline=_fitted_headline("joint", m.M_joint, m.M_joint_lo, m.M_joint_hi,
                                                    m.M_joint_hi_unbounded, m.n))
    if m.available:
        return replace(m, headline=_fitted_headline("per_run", m.M, m.M_lo, m.M_hi, m.M_hi_unbounded, m.n))
    if data.n_below and not data.n_above and data.lower_limit is not None:
        return _as_bound(m, data.lower_limit, DATA_ONLY_WHAT, data.n)
    return m


def wallclock_saving(clock: Frontier, runs: list[Run]) -> WallclockSaving:
    key, what = clock.basis if clock.basis else (None, None)
    if key is not None and not all(run_time(r, key) is not None for r in runs):
        out = interpolated_saving(Frontier([], [], why=f"not every run of the arm recorded {key}"), runs, lambda r: None)
    else:
        out = interpolated_saving(clock, runs, lambda r: run_time(r, key) if key is not None else None)
    return WallclockSaving.reading(out, what)


FRONTIER_VERDICT = "the frontier"  # the single-level arm is the reference, never judged against its own fit
WITHIN_FIT_ERROR = "within the fit's own error"


def verdict_word(m: Multiplier, interpolated: Saving, within: Optional[bool] = None) -> str:
    """From the headline M's interval (a bound: from its value); from the interpolated saving's when there
    is no headline. An M inside the fit's own error (`within`) is no saving or cost, however tight its
    interval."""
    head = m.headline
    if head is not None and head.kind == "bound":
        return "saves FLOPs (M only bounded)" if head.M_lo is not None and head.M_lo > 1 else "no evidence either way"
    if head is not None and head.M is not None:
        word = interval_word(head.n if head.n is not None else m.n, head.M_lo, head.M_hi, 1.0)
        return WITHIN_FIT_ERROR if within and word in ("saves FLOPs", "costs FLOPs") else word
    if not interpolated.available:
        return "no verdict"
    return interval_word(interpolated.n, interpolated.saving_lo, interpolated.saving_hi)
