"""The frontier's tuning space: the settings it tried at each budget (and which won), and how much it
gained from each dimension beyond the plain LR grid.

A dimension is the schedule control (the frontier without its runs), or a tuned key the frontier's
single-level configurations vary: the key's values tried at every budget are its base grid, and the
frontier without the others is the one without the finer grid (an LR grid refined around the best
value at some budgets); a key whose every value is tried at every budget (two warm-up lengths) is
restricted to its most tried value. Each restricted frontier is re-selected on the selection seeds and
refitted; its `gain_M` is the full frontier's points read on the restricted fit (geometric mean of
C_eq / C: > 1, the full frontier needs that many times less compute), and each arm's M is read against
it by the verdict's own rule (`verdict.headline`, a point reading, no interval): on the restricted
frontier's points inside its data, "M > x" only where the data decide it (`ondata`: beyond with
confidence, x the lower confidence limit; or the data-only bound), else on its fit.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Optional, Sequence

import numpy as np

from mltrain.tools.compare import frontier as frontiers
from mltrain.tools.compare.arms import Arm, _mean_loss, select, setting_of
from mltrain.tools.compare.loading import Configuration
from mltrain.tools.compare.powerlaw import Fit, fit_power_law, read
from mltrain.tools.compare.results import BudgetTried, Gain, GainReading, TriedSetting
from mltrain.tools.compare.verdict import DATA_ONLY_WHAT, Draws, fit_error, headline, multiplier, on_data

CONTROL = "schedule_control"
CONTROL_DIMENSION = "schedule control"  # the gain whose frontier is the one the control is measured against


def family(c: Configuration) -> str:
    """The schedule family of a frontier candidate: the control's, or the run's schedule.name."""
    if c.run_kind == CONTROL:
        return "schedule control (constant high-LR phase first)"
    return str(setting_of(c.runs[0], ("schedule.name",)).get("schedule.name", "default schedule"))


def tried_per_budget(frontier: frontiers.Frontier, configs: list[Configuration], arms: list[Arm],
                     tuned: Sequence[str], names: dict, select_seeds: Optional[list]) -> list[BudgetTried]:
    """Per budget, every single-level setting tried there: its family, tuned values, mean selection
    loss, whether its arm kept it at that budget and whether its runs are on the frontier's envelope."""
    kept = {id(c) for a in arms if a.run_kind in frontiers.SINGLE_LEVEL for c in a.selected_by_budget.values()}
    on_envelope = {p.source for p in frontier.points}
    out = []
    for budget in sorted({c.budget for c in configs if c.run_kind in frontiers.SINGLE_LEVEL}):
        rows = tuple(TriedSetting(names[c.key], c.run_kind, family(c), setting_of(c.runs[0], tuned),
                                  _mean_loss(c, select_seeds or None), id(c) in kept,
                                  any(r.source in on_envelope for r in c.runs))
                     for c in configs if c.run_kind in frontiers.SINGLE_LEVEL and c.budget == budget)
        out.append(BudgetTried(budget, rows))
    return out


def _restrictions(configs: list[Configuration], tuned: Sequence[str]) -> list[tuple[str, str, Callable]]:
    """(dimension, what the restricted frontier keeps, which configurations it keeps)."""
    out = []
    if any(c.run_kind == CONTROL for c in configs):
        out.append((CONTROL_DIMENSION, "single-level runs without the schedule control's",
                    lambda c: c.run_kind != CONTROL))
    plain = [c for c in configs if c.run_kind != CONTROL]
    budgets = {c.budget for c in plain}
    for key in tuned:
        values = {repr(v): v for c in plain if (v := setting_of(c.runs[0], (key,)).get(key)) is not None}
        if len(values) < 2:
            continue
        at = {b: {repr(setting_of(c.runs[0], (key,)).get(key)) for c in plain if c.budget == b} for b in budgets}
        base = set.intersection(*at.values()) & set(values)
        if base and base != set(values):
            what = f"finer {key}", f"{key} on its base grid ({', '.join(str(values[v]) for v in sorted(base))})"
        else:
            common = Counter(repr(setting_of(c.runs[0], (key,)).get(key)) for c in plain).most_common(1)[0][0]
            base, what = {common}, (key, f"one {key}: {values.get(common, common)}")
        def keeps(c: Configuration, key: str = key, base: frozenset = frozenset(base)) -> bool:
            return c.run_kind == CONTROL or repr(setting_of(c.runs[0], (key,)).get(key)) in base
        out.append((*what, keeps))
    return out


def _restricted(configs, arms: list[Arm], select_seeds, keep: Callable) -> frontiers.Frontier:
    sub = []
    for a in arms:
        if a.run_kind in frontiers.SINGLE_LEVEL:
            b = Arm(a.run_kind, a.label, [c for c in a.configs if keep(c)], a.tuned)
            select(b, select_seeds)
            sub.append(b)
    return frontiers.build([c for c in configs if keep(c)], sub, select_seeds)[0]


def _reading(fr: frontiers.Frontier, fit: Fit, runs) -> GainReading:
    """An arm's M against the restricted frontier, led as the verdict leads (`headline`): a bound only
    where its data decide one, never off the fitted curve."""
    m, _ = multiplier(fit, runs, Draws(), 0, fr.points)
    m = headline(m, *on_data(fr, runs), fit_error(fit, fr))
    head = m.headline
    if head is None:
        return GainReading()
    if head.kind == "bound":
        return GainReading(None, head.M_lo, "data_only_bound" if m.bound is not None and m.bound.what == DATA_ONLY_WHAT else "bound")
    if head.kind == "interpolated":  # its t interval on the frontier's points (no bootstrap: none is drawn here)
        return GainReading(head.M, None, head.kind, head.M_lo, head.M_hi, head.log_se, head.dof)
    return GainReading(head.M, None, head.kind)


def gains(full: frontiers.Frontier, configs: list[Configuration], arms: list[Arm], tuned: Sequence[str],
          select_seeds: Optional[list], measured: list[Arm]) -> list[Gain]:
    """Per dimension: the frontier without it, its gain_M and each measured arm's M against it."""
    candidates = [c for c in configs if c.run_kind in frontiers.SINGLE_LEVEL]
    out = []
    for dimension, what, keep in _restrictions(candidates, tuned):
        fr = _restricted(candidates, arms, select_seeds, keep)
        pts = fr.points
        fit = fit_power_law([p.flops for p in pts], [p.loss for p in pts])
        gain = None
        if fit.available:
            logs = [math.log(r.multiplier) for p in full.points if (r := read(fit, p.flops, p.loss)).multiplier]
            gain = math.exp(float(np.mean(logs))) if logs else None
        readings = {a.name: _reading(fr, fit, a.eval_runs) for a in measured if a.eval_runs}
        out.append(Gain(dimension, what, len(pts), fit.available, fit.why, gain, readings))
    return out
