"""The tuned single-level frontier: for each evaluation seed, the lower envelope in (total FLOPs, final
held-out loss) of the single-level runs, whatever their optimizer and schedule settings and budgets.
Single-level means the kinds in SINGLE_LEVEL: plain training and the LR-schedule control (the fine model
alone, a constant high-LR phase before the usual schedule) are both candidates at their FLOPs; the
control is also measured as an arm, against the frontier built without it (`build(..., without=...)`).

Which runs: without selection seeds, every usable single-level run (the envelope itself picks the best
setting at each FLOPs, on the seeds that measure it). With selection seeds, only the settings each
single-level arm kept per budget on those seeds, measured on the other seeds. The same envelope on a
wall-clock axis (train time per run) gives the wall-clock saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from mltrain.tools.compare.arms import Arm
from mltrain.tools.compare.loading import Configuration, Run, _seed_sort
from mltrain.tools.compare.statistics import FrontierPoint, lower_envelope

# Run time, evaluation excluded, when the run recorded it; else its wall time, evaluation included.
SINGLE_LEVEL = ("single", "schedule_control")  # run kinds that train the fine model alone, whatever the schedule
TIME_KEYS = (("train_time_s", "train time (evaluation excluded)"),
             ("wall_time_s", "wall time (includes evaluation and diagnostics)"))


@dataclass
class Frontier:
    configs: list[Configuration]  # the single-level configurations it is built from
    seeds: list  # the evaluation seeds
    per_seed: dict[Any, list[FrontierPoint]] = field(default_factory=dict)  # envelope of each seed
    means: list[FrontierPoint] = field(default_factory=list)  # each configuration's mean over the seeds
    mean: list[FrontierPoint] = field(default_factory=list)  # envelope of the configurations' means
    why: Optional[str] = None  # why there is no frontier to read savings on (None: there is one)
    basis: Optional[tuple[str, str]] = None  # wall-clock frontier: (summary key, what it measures)

    @property
    def points(self) -> list[FrontierPoint]:
        return [p for s in self.seeds for p in self.per_seed.get(s, [])]

    def envelope_for(self, seed: Any) -> tuple[Optional[list[FrontierPoint]], bool]:
        """(envelope, paired): the seed's own when it has two points or more, else the mean's."""
        own = self.per_seed.get(seed)
        if own is not None and len(own) >= 2:
            return own, True
        return (self.mean if len(self.mean) >= 2 else None), False

    def placed(self, runs: Iterable[Run], x: Callable[[Run], Optional[float]] = lambda r: r.total_flops()
               ) -> Iterator[tuple[Run, list[FrontierPoint], bool, float, float]]:
        """(run, its envelope, paired, x(run), final val loss) for each run that has all of them."""
        for r in runs:
            env, paired = self.envelope_for(r.seed)
            cost, loss = x(r), r.final("val")
            if env is not None and cost and loss is not None:
                yield r, env, paired, cost, loss


def run_time(run: Run, key: str) -> Optional[float]:
    v = run.summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def time_basis(runs: list[Run]) -> Optional[tuple[str, str]]:
    """(summary key, description) of the first time every run recorded, or None."""
    for key, what in TIME_KEYS:
        if runs and all(run_time(r, key) is not None for r in runs):
            return key, what
    return None


def _point(run: Run, x: Callable[[Run], Optional[float]]) -> Optional[FrontierPoint]:
    f, loss = x(run), run.final("val")
    return FrontierPoint(f, loss, run.budget, run.source) if f and loss is not None else None


def envelope(configs: list[Configuration], seeds: list, x: Callable[[Run], Optional[float]]) -> Frontier:
    """Per seed and mean lower envelopes of (x(run), final val loss) over the configurations' runs."""
    fr = Frontier(configs, seeds)
    for s in seeds:
        pts = [p for c in configs for r in c.runs if r.seed == s for p in [_point(r, x)] if p is not None]
        env = lower_envelope(pts)
        if env:
            fr.per_seed[s] = env
    for c in configs:
        pts = [p for r in c.runs if r.seed in seeds for p in [_point(r, x)] if p is not None]
        if pts:
            fr.means.append(FrontierPoint(float(np.mean([p.flops for p in pts])), float(np.mean([p.loss for p in pts])),
                                          c.budget))
    fr.mean = lower_envelope(fr.means)
    if not fr.per_seed:
        fr.why = "no finished single-level run on the evaluation seeds"
    elif max(len(e) for e in fr.per_seed.values()) < 2 and len(fr.mean) < 2:
        fr.why = "only one single-level FLOPs point per seed: run several train.budget values for a frontier"
    return fr


def frontier_configs(configs: list[Configuration], arms: list[Arm], select_seeds: Optional[list],
                     kinds: tuple = SINGLE_LEVEL) -> list[Configuration]:
    """Every single-level configuration of `kinds`, or with selection seeds the ones their arms kept."""
    singles = [c for c in configs if c.run_kind in kinds]
    if not select_seeds:
        return singles
    kept = {id(c) for a in arms if a.run_kind in kinds for c in a.selected_by_budget.values()}
    return [c for c in singles if id(c) in kept]


def eval_seeds(runs: list[Run], select_seeds: Optional[list]) -> list:
    seeds = {r.seed for r in runs if r.seed is not None}
    if select_seeds:
        seeds -= set(select_seeds)
    return sorted(seeds, key=_seed_sort)


def build(configs: list[Configuration], arms: list[Arm], select_seeds: Optional[list],
          kinds: tuple = SINGLE_LEVEL) -> tuple[Frontier, Frontier]:
    """(the FLOPs frontier, the wall-clock frontier) on the evaluation seeds, from the runs of `kinds`."""
    chosen = frontier_configs(configs, arms, select_seeds, kinds)
    runs = [r for c in chosen for r in c.runs]
    seeds = eval_seeds(runs, select_seeds)
    flops = envelope(chosen, seeds, lambda r: r.total_flops())
    if not chosen:
        flops.why = "no usable single-level runs"
    basis = time_basis([r for r in runs if r.seed in seeds])
    machines = {r.machine for c in configs for r in c.runs} - {None}
    if len(machines) > 1:  # seconds of two machines are not one clock
        clock = Frontier(chosen, seeds, why=f"the runs were made on {len(machines)} machines: wall-clock times "
                         "are not compared across machines")
    elif basis is None:
        clock = Frontier(chosen, seeds, why="the single-level runs did not all record their time")
    else:
        clock = envelope(chosen, seeds, lambda r: run_time(r, basis[0]))
        clock.basis = basis
    return flops, clock
