"""Each arm's verdict, from its kept setting's runs on the evaluation seeds: the final held-out loss, the
compute multiplier on the fitted frontier (bootstrap interval over seeds), and beside it the saving read
on the frontier's points (interpolated) and the same saving on a wall-clock axis.

Bootstrap: BOOTSTRAP_RESAMPLES draws of the evaluation seeds with replacement (numpy Generator seeded
with BOOTSTRAP_SEED, so a report is reproducible); each draw refits the frontier on the drawn seeds'
points and takes each arm's multiplier over its runs on the drawn seeds; the interval is the 2.5 and
97.5 percentiles of the draws. The fit of a draw depends only on the seeds drawn and how often, so each
such multiset is fitted once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from mltrain.tools.compare.arms import Arm
from mltrain.tools.compare.frontier import Frontier, run_time
from mltrain.tools.compare.loading import Run
from mltrain.tools.compare.powerlaw import Fit, fit_power_law, fit_shift, read
from mltrain.tools.compare.results import (Bound, BudgetReading, FitError, Headline, LossInterval, Multiplier,
                                          RunReading, Saving, WallclockSaving)
from mltrain.tools.compare.statistics import CONFIDENCE, FrontierPoint, frontier_flops, interval
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
    return LossInterval(iv.mean, iv.low, iv.high, iv.n)


def log_mean_multiplier(fit: Fit, runs: list[Run]) -> tuple[Optional[float], bool]:
    """(the mean log M of the runs on `fit`, whether the arm lies beyond the fit's data: its equal-loss
    point past the largest FLOPs fitted, or a run at or below the floor E)."""
    logs, unreachable = [], False
    for r in runs:
        reading = read(fit, r.total_flops(), r.final("val"))
        if reading.multiplier:
            logs.append(math.log(reading.multiplier))
        else:
            unreachable = True
    if not logs:
        return None, True
    log_m = float(np.mean(logs))
    log_c = float(np.mean([math.log(r.total_flops()) for r in runs]))
    return log_m, unreachable or log_m + log_c > math.log(fit.flop_range[1]) * (1 + 1e-12)


@dataclass
class Draws:
    """One arm's bootstrap: the multiplier of each draw that gave one (per-run reading and joint fit),
    and how many draws were degenerate (a fit at its bounds, no fit, or the arm beyond the draw's data)."""

    values: list = field(default_factory=list)
    joint: list = field(default_factory=list)
    degenerate: int = 0
    total: int = 0


def _joint(fit: Fit, frontier_pts: list, runs: list[Run], log_m0: float) -> Optional[float]:
    return fit_shift(([p.flops for p in frontier_pts], [p.loss for p in frontier_pts]),
                     ([r.total_flops() for r in runs], [r.final("val") for r in runs]), fit.law, log_m0)


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
    by_seed = {id(a): {} for a in arms}
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
            one, acc = per_draw[draw][id(a)], samples[id(a)]
            acc.values += one.values
            acc.joint += one.joint
            acc.degenerate += one.degenerate
            acc.total += one.total
    return samples, fitted


def _per_run(fit: Fit, runs: list[Run]) -> list[RunReading]:
    per_run = []
    for r in runs:
        reading = read(fit, r.total_flops(), r.final("val")) if fit.available else None
        per_run.append(RunReading(r.seed, r.source, r.total_flops(), r.final("val"),
                                  reading.flops_eq if reading else None, reading.multiplier if reading else None,
                                  bool(reading and reading.extrapolated), reading.beyond_data if reading else None))
    return per_run


def bound_value(fit: Fit, runs: list[Run]) -> float:
    """C_max / C_run: the most M the frontier's data can show (C_run the runs' geometric mean FLOPs)."""
    return fit.flop_range[1] / math.exp(float(np.mean([math.log(r.total_flops()) for r in runs])))


def _bound(fit: Fit, runs: list[Run]) -> Optional[Bound]:
    """M > C_max / C_run when the arm's equal-loss point lies past the frontier's largest FLOPs."""
    _, beyond = log_mean_multiplier(fit, runs)
    if not beyond:
        return None
    return Bound("lower", bound_value(fit, runs),
                 "the arm's equal-loss point lies beyond the frontier's largest FLOPs C_max: M > C_max / C_run")


def _percentiles(values: list) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = (float(v) for v in np.percentile(values, [tail, 100 - tail]))
    return lo, hi


def _intervals(m: Multiplier, draws: Draws, fitted: int) -> Multiplier:
    """M's (and the joint fit's) bootstrap interval; the upper end unbounded when too many draws are
    degenerate (DEGENERATE_SHARE)."""
    share = draws.degenerate / draws.total if draws.total else 0.0
    unbounded = share > DEGENERATE_SHARE
    warnings = list(m.warnings)
    m = replace(m, n_degenerate=draws.degenerate, degenerate_share=share,
                draws=tuple(float(f"{v:.6g}") for v in draws.values))  # the draws, for the ladder's trend
    if len(draws.values) < BOOTSTRAP_RESAMPLES / 2:
        warnings.append(f"only {len(draws.values)} of {BOOTSTRAP_RESAMPLES} resamples gave a multiplier: no interval")
        return replace(m, warnings=tuple(warnings))
    lo, hi = _percentiles(draws.values)
    m = replace(m, M_lo=lo, M_hi=None if unbounded else hi, saving_lo=1 - 1 / lo,
                saving_hi=None if unbounded else 1 - 1 / hi, M_hi_unbounded=unbounded)
    if len(draws.joint) >= BOOTSTRAP_RESAMPLES / 2 and m.M_joint is not None:
        jlo, jhi = _percentiles(draws.joint)
        m = replace(m, M_joint_lo=jlo, M_joint_hi=None if unbounded else jhi, M_joint_hi_unbounded=unbounded)
    if unbounded:
        warnings.append(f"{draws.degenerate} of {draws.total} resamples degenerate (a fit at its bounds, "
                        f"or the arm beyond the draw's frontier data): the interval's upper end is unbounded")
    if fitted < BOOTSTRAP_RESAMPLES:
        warnings.append(f"{BOOTSTRAP_RESAMPLES - fitted} of {BOOTSTRAP_RESAMPLES} resamples gave no fit")
    return replace(m, warnings=tuple(warnings))


def multiplier(fit: Fit, runs: list[Run], draws: Draws, fitted: int,
               frontier_pts: Sequence[FrontierPoint] = ()) -> tuple[Multiplier, list[RunReading]]:
    """(the arm's multiplier with its interval, a bound beyond the data, the joint fit; one reading per run)."""
    per_run = _per_run(fit, runs)
    if not fit.available:
        return Multiplier.unavailable(f"no fit of the frontier: {fit.why}"), per_run
    if not runs:
        return Multiplier.unavailable("no run on an evaluation seed"), per_run
    bound = _bound(fit, runs)
    reached = [e for e in per_run if e.M]
    if not reached:
        return replace(Multiplier.unavailable(f"every final loss is at or below the fitted floor E = {fit.law.E:.4g}: "
                                              "no single-level compute reaches it"), bound=bound), per_run
    m = math.exp(float(np.mean([math.log(e.M) for e in reached])))
    beyond = [e.beyond_data for e in reached if e.extrapolated]
    warnings = []
    if len(reached) < len(per_run):
        warnings.append(f"{len(per_run) - len(reached)} run(s) at or below the fitted floor E "
                        f"({fit.law.E:.4g}) left out: the multiplier understates them")
    out = Multiplier(True, None, m, saving=1 - 1 / m, n=len(reached), n_resamples=len(draws.values), bound=bound,
                     M_joint=_joint(fit, list(frontier_pts), runs, math.log(m)) if frontier_pts else None,
                     extrapolated=bool(beyond), beyond_data=max(beyond) if beyond else None)
    if len({e.seed for e in reached}) < MIN_SEEDS_FOR_INTERVAL:
        out = replace(out, warnings=(*warnings, f"fewer than {MIN_SEEDS_FOR_INTERVAL} evaluation seeds: no interval"))
    else:
        out = _intervals(replace(out, warnings=tuple(warnings)), draws, fitted)
    if bound is not None:
        out = replace(out, M_hi=None, saving_hi=None, M_hi_unbounded=True, M_joint_hi=None, M_joint_hi_unbounded=True)
    return out, per_run


def fit_error(fit: Fit, frontier: Frontier) -> FitError:
    """The fitted frontier read at its own points: per budget, M = C_eq / C of the frontier's points
    (geometric mean over the evaluation seeds, as an arm's M is). A perfect fit gives 1 at every budget;
    the range is the fit's own error at its data, and an arm's M inside it is no saving or cost."""
    if not fit.available:
        return FitError(False, f"no fit of the frontier: {fit.why}")
    by_budget: dict[Any, list[float]] = {}
    for p in frontier.points:
        reading = read(fit, p.flops, p.loss)
        if reading.multiplier:
            by_budget.setdefault(p.budget, []).append(math.log(reading.multiplier))
    per = tuple(BudgetReading(b, math.exp(float(np.mean(v))), len(v))
                for b, v in sorted(by_budget.items(), key=lambda kv: float(kv[0])))
    if not per:
        return FitError(False, "no frontier point reads on its fit (every one at or below the fitted floor)")
    ms = [e.M for e in per]
    return FitError(True, None, per, min(ms), max(ms))


def interpolated_saving(frontier: Frontier, runs: list[Run], x: Callable[[Run], Optional[float]]) -> Saving:
    """The saving 1 − x_run / x*, x* read on the frontier's points (linear in log x between them), over
    the runs; a run beyond the frontier's ends has only a bound and is left out (counted)."""
    if frontier.why is not None:
        return Saving(False, frontier.why, n_outside=Outside())
    values, unpaired, sides = [], 0, []
    for r in runs:
        env, paired = frontier.envelope_for(r.seed)
        cost, loss = x(r), r.final("val")
        if env is None or not cost or loss is None:
            continue
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
        return Saving(False, why, n_outside=outside, n_unpaired=unpaired, warnings=tuple(iv.warnings))
    return Saving(True, None, iv.mean, iv.low, iv.high, iv.n, outside, unpaired, tuple(iv.warnings))


def interpolated_multiplier(frontier: Frontier, runs: list[Run]) -> Optional[float]:
    """M read on the frontier's own points, no curve: the geometric mean over the runs inside the
    frontier of F* / F_run (F* interpolated in log FLOPs on the run's seed's envelope)."""
    logs = []
    for r in runs if frontier.why is None else []:
        env, _ = frontier.envelope_for(r.seed)
        if env is None or not r.total_flops() or r.final("val") is None:
            continue
        reading = frontier_flops(env, r.final("val"))
        if reading.flops is not None:
            logs.append(math.log(reading.flops / r.total_flops()))
    return math.exp(float(np.mean(logs))) if logs else None


def headline(m: Multiplier, interpolated: Saving, m_interp: Optional[float], error: FitError) -> Multiplier:
    """The multiplier with the M the report leads with, and whether the fitted and interpolated readings
    disagree: a bound beyond the data; else the interpolated M where the fit's own error is wider than
    ±FIT_BAND_LIMIT; else the joint fit's M when it converged, else the per-run reading's (see
    docs/outputs.md)."""
    band = error.band
    fitted = m.M_joint if m.M_joint is not None else m.M
    disagrees = bool(band is not None and fitted and m_interp and abs(math.log(fitted) - math.log(m_interp)) > band)
    warnings = m.warnings
    if disagrees:
        warnings += (f"the fitted M ({fitted:.3g}) and the one read on the frontier's points ({m_interp:.3g}) "
                     f"differ by more than the fit's own error (±{100 * (math.exp(band) - 1):.1f}%)",)
    m = replace(m, M_interpolated=m_interp, fit_disagrees=disagrees, warnings=warnings)
    if m.bound:
        return replace(m, headline=Headline("bound", None, m.bound.value, None, True))
    if band is not None and band > math.log(1 + FIT_BAND_LIMIT) and m_interp is not None:
        lo, hi = interpolated.saving_lo, interpolated.saving_hi
        return replace(m, headline=Headline("interpolated", m_interp, 1 / (1 - lo) if lo is not None else None,
                                            1 / (1 - hi) if hi is not None and hi < 1 else None, False))
    if m.M_joint is not None:
        return replace(m, headline=Headline("joint", m.M_joint, m.M_joint_lo, m.M_joint_hi, m.M_joint_hi_unbounded))
    return replace(m, headline=Headline("per_run", m.M, m.M_lo, m.M_hi, m.M_hi_unbounded))


def wallclock_saving(clock: Frontier, runs: list[Run]) -> WallclockSaving:
    key, what = clock.basis if clock.basis else (None, None)
    if key is not None and not all(run_time(r, key) is not None for r in runs):
        out = interpolated_saving(Frontier([], [], why=f"not every run of the arm recorded {key}"), runs, lambda r: None)
    else:
        out = interpolated_saving(clock, runs, lambda r: run_time(r, key))
    return WallclockSaving.reading(out, what)


FRONTIER_VERDICT = "the frontier"  # the single-level arm is the reference, never judged against its own fit
WITHIN_FIT_ERROR = "within the fit's own error"


def verdict_word(m: Multiplier, interpolated: Saving, within: Optional[bool] = None) -> str:
    """From the headline M's interval (a bound: from its value); from the interpolated saving's when there
    is no multiplier. An M inside the fit's own error (`within`) is no saving or cost, however tight its
    interval."""
    head = m.headline
    if head is not None and head.kind == "bound":
        return "saves FLOPs (M only bounded)" if head.M_lo > 1 else "no evidence either way"
    if m.available:
        lo, hi = (head.M_lo, head.M_hi) if head is not None else (m.M_lo, m.M_hi)
        if lo is None:
            return f"too few seeds (n={m.n})"
        word = "saves FLOPs" if lo > 1 else ("costs FLOPs" if hi is not None and hi < 1 else "no evidence either way")
        return WITHIN_FIT_ERROR if within and word != "no evidence either way" else word
    if not interpolated.available:
        return "no verdict"
    if interpolated.saving_lo is None:
        return f"too few seeds (n={interpolated.n})"
    if interpolated.saving_lo > 0:
        return "saves FLOPs"
    return "costs FLOPs" if interpolated.saving_hi < 0 else "no evidence either way"
