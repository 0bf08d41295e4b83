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
from typing import Any, Callable, Optional

import numpy as np

from mltrain.tools.compare.arms import Arm
from mltrain.tools.compare.frontier import Frontier, run_time
from mltrain.tools.compare.loading import Run
from mltrain.tools.compare.powerlaw import Fit, fit_power_law, read
from mltrain.tools.compare.statistics import CONFIDENCE, frontier_flops, interval

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# With n seeds, a draw repeats one seed n times with probability n^(1-n): 11% at 3 seeds, so each 2.5%
# tail of the bootstrap would be such draws and the "interval" just the spread of single seeds; 1.6% at 4.
MIN_SEEDS_FOR_INTERVAL = 4


def loss_interval(runs: list[Run]) -> dict:
    iv = interval([r.final("val") for r in runs])
    return {"mean": iv.mean, "lo": iv.low, "hi": iv.high, "n": iv.n}


def _log_mean_multiplier(fit: Fit, runs: list[Run]) -> Optional[float]:
    logs = []
    for r in runs:
        reading = read(fit, r.total_flops(), r.final("val"))
        if reading.multiplier:
            logs.append(math.log(reading.multiplier))
    return float(np.mean(logs)) if logs else None


def bootstrap(frontier: Frontier, fit: Fit, arms: list[Arm]) -> tuple[dict[int, np.ndarray], int]:
    """({id(arm): the multipliers of the draws}, how many draws gave a fit)."""
    by_seed = {id(a): {} for a in arms}
    for a in arms:
        for r in a.eval_runs:
            by_seed[id(a)].setdefault(r.seed, []).append(r)
    seeds = sorted({*frontier.per_seed, *(s for d in by_seed.values() for s in d)}, key=str)
    samples: dict[int, list[float]] = {id(a): [] for a in arms}
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    refits: dict[tuple, Fit] = {}  # a draw's fit depends only on which seeds it drew, how often: few seeds, few fits
    fitted = 0
    for _ in range(BOOTSTRAP_RESAMPLES if len(seeds) >= MIN_SEEDS_FOR_INTERVAL else 0):
        draw = tuple(sorted(int(i) for i in rng.integers(0, len(seeds), len(seeds))))
        if draw not in refits:
            pts = [p for i in draw for p in frontier.per_seed.get(seeds[i], [])]
            refits[draw] = fit_power_law([p.flops for p in pts], [p.loss for p in pts], start=fit.law)
        refit = refits[draw]
        if not refit.available:
            continue
        fitted += 1
        for a in arms:
            log_m = _log_mean_multiplier(refit, [r for i in draw for r in by_seed[id(a)].get(seeds[i], [])])
            if log_m is not None:
                samples[id(a)].append(math.exp(log_m))
    return {k: np.asarray(v) for k, v in samples.items()}, fitted


def _unavailable(why: str) -> dict:
    return {"available": False, "why": why, "M": None, "M_lo": None, "M_hi": None, "saving": None,
            "saving_lo": None, "saving_hi": None, "extrapolated": False, "beyond_data": None, "n": 0,
            "n_resamples": 0, "warnings": []}


def multiplier(fit: Fit, runs: list[Run], draws: np.ndarray, fitted: int) -> tuple[dict, list[dict]]:
    """(the arm's multiplier with its interval, one reading per run)."""
    per_run = []
    for r in runs:
        reading = read(fit, r.total_flops(), r.final("val")) if fit.available else None
        per_run.append({"seed": r.seed, "run": r.source, "flops": r.total_flops(), "final_val_loss": r.final("val"),
                        "flops_eq": reading.flops_eq if reading else None,
                        "M": reading.multiplier if reading else None,
                        "extrapolated": bool(reading and reading.extrapolated),
                        "beyond_data": reading.beyond_data if reading else None})
    if not fit.available:
        return _unavailable(f"no fit of the frontier: {fit.why}"), per_run
    if not runs:
        return _unavailable("no run on an evaluation seed"), per_run
    reached = [e for e in per_run if e["M"]]
    if not reached:
        return _unavailable(f"every final loss is at or below the fitted floor E = {fit.law.E:.4g}: "
                            "no single-level compute reaches it"), per_run
    m = math.exp(float(np.mean([math.log(e["M"]) for e in reached])))
    out = {**_unavailable(""), "available": True, "why": None, "M": m, "saving": 1 - 1 / m, "n": len(reached),
           "n_resamples": len(draws)}
    beyond = [e["beyond_data"] for e in reached if e["extrapolated"]]
    out["extrapolated"], out["beyond_data"] = bool(beyond), (max(beyond) if beyond else None)
    if len(reached) < len(per_run):
        out["warnings"].append(f"{len(per_run) - len(reached)} run(s) at or below the fitted floor E "
                               f"({fit.law.E:.4g}) left out: the multiplier understates them")
    if len({e['seed'] for e in reached}) < MIN_SEEDS_FOR_INTERVAL:
        out["warnings"].append(f"fewer than {MIN_SEEDS_FOR_INTERVAL} evaluation seeds: no interval")
    elif len(draws) == 0 or len(draws) < BOOTSTRAP_RESAMPLES / 2:
        out["warnings"].append(f"only {len(draws)} of {BOOTSTRAP_RESAMPLES} resamples gave a multiplier: no interval")
    else:
        tail = 100 * (1 - CONFIDENCE) / 2
        lo, hi = (float(v) for v in np.percentile(draws, [tail, 100 - tail]))
        out.update(M_lo=lo, M_hi=hi, saving_lo=1 - 1 / lo, saving_hi=1 - 1 / hi)
        if fitted < BOOTSTRAP_RESAMPLES:
            out["warnings"].append(f"{BOOTSTRAP_RESAMPLES - fitted} of {BOOTSTRAP_RESAMPLES} resamples gave no fit")
    return out, per_run


def fit_error(fit: Fit, frontier: Frontier) -> dict:
    """The fitted frontier read at its own points: per budget, M = C_eq / C of the frontier's points
    (geometric mean over the evaluation seeds, as an arm's M is). A perfect fit gives 1 at every budget;
    the range is the fit's own error at its data, and an arm's M inside it is no saving or cost."""
    out: dict[str, Any] = {"available": False, "why": None, "per_budget": [], "M_lo": None, "M_hi": None,
                           "what": "M of the frontier's own points on its fit, per budget (geometric mean over "
                                   "the evaluation seeds); 1 everywhere for a perfect fit"}
    if not fit.available:
        return {**out, "why": f"no fit of the frontier: {fit.why}"}
    by_budget: dict[Any, list[float]] = {}
    for p in frontier.points:
        reading = read(fit, p.flops, p.loss)
        if reading.multiplier:
            by_budget.setdefault(p.budget, []).append(math.log(reading.multiplier))
    per = [{"budget": b, "M": math.exp(float(np.mean(v))), "n": len(v)}
           for b, v in sorted(by_budget.items(), key=lambda kv: float(kv[0]))]
    if not per:
        return {**out, "why": "no frontier point reads on its fit (every one at or below the fitted floor)"}
    ms = [e["M"] for e in per]
    return {**out, "available": True, "per_budget": per, "M_lo": min(ms), "M_hi": max(ms)}


def within_fit_error(m: dict, error: dict) -> Optional[bool]:
    """Whether an arm's M lies inside the fit's own error at the frontier's points (None: no M or no error)."""
    if not m.get("available") or not error.get("available"):
        return None
    return bool(error["M_lo"] <= m["M"] <= error["M_hi"])


def interpolated_saving(frontier: Frontier, runs: list[Run], x: Callable[[Run], Optional[float]]) -> dict:
    """The saving 1 − x_run / x*, x* read on the frontier's points (linear in log x between them), over
    the runs; a run beyond the frontier's ends has only a bound and is left out (counted)."""
    out: dict[str, Any] = {"available": False, "why": frontier.why, "saving": None, "saving_lo": None,
                           "saving_hi": None, "n": 0, "n_outside": {"below": 0, "above": 0}, "n_unpaired": 0,
                           "warnings": []}
    if frontier.why is not None:
        return out
    values = []
    for r in runs:
        env, paired = frontier.envelope_for(r.seed)
        cost, loss = x(r), r.final("val")
        if env is None or not cost or loss is None:
            continue
        reading = frontier_flops(env, loss)
        if reading.flops is None:
            out["n_outside"][reading.side] += 1
            continue
        values.append(1 - cost / reading.flops)
        out["n_unpaired"] += not paired
    iv = interval(values, "no saving")
    out["warnings"] = list(iv.warnings)
    if iv.n == 0:
        outside = sum(out["n_outside"].values())
        out["why"] = (f"every run is outside the frontier ({out['n_outside']['below']} below its longest budget, "
                      f"{out['n_outside']['above']} above its shortest)" if outside else "no run to read")
        return out
    out.update(available=True, why=None, saving=iv.mean, saving_lo=iv.low, saving_hi=iv.high, n=iv.n)
    return out


def wallclock_saving(clock: Frontier, runs: list[Run]) -> dict:
    key, what = clock.basis if clock.basis else (None, None)
    if key is not None and not all(run_time(r, key) is not None for r in runs):
        out = interpolated_saving(Frontier([], [], why=f"not every run of the arm recorded {key}"), runs, lambda r: None)
    else:
        out = interpolated_saving(clock, runs, lambda r: run_time(r, key))
    out["time_basis"] = what
    return out


FRONTIER_VERDICT = "the frontier"  # the single-level arm is the reference, never judged against its own fit
WITHIN_FIT_ERROR = "within the fit's own error"


def verdict_word(m: dict, interpolated: dict, within: Optional[bool] = None) -> str:
    """From the multiplier's interval; from the interpolated saving's when there is no multiplier. An M
    inside the fit's own error (`within`) is no saving or cost, however tight its interval."""
    if m["available"]:
        if m["M_lo"] is None:
            return f"too few seeds (n={m['n']})"
        word = "saves FLOPs" if m["M_lo"] > 1 else ("costs FLOPs" if m["M_hi"] < 1 else "no evidence either way")
        return WITHIN_FIT_ERROR if within and word != "no evidence either way" else word
    if not interpolated["available"]:
        return "no verdict"
    if interpolated["saving_lo"] is None:
        return f"too few seeds (n={interpolated['n']})"
    if interpolated["saving_lo"] > 0:
        return "saves FLOPs"
    return "costs FLOPs" if interpolated["saving_hi"] < 0 else "no evidence either way"
