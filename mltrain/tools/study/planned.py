"""What a study costs: every run its planner can launch, as a range, and the hours at a measured rate.

    planned now   the runs every course of the study has: every arm's grid on the selection seeds (the
                  frontier's with its warm-up lengths at every budget of its grid, the best few of them
                  above frontier.halving_from), the two x sqrt(3) neighbours of each budget's chosen LR,
                  the control's schedule at each budget, the chosen settings on the evaluation seeds
    at most       ... and every adaptive rule of tuning.py firing once per choice: an edge extension per
                  numeric tuned key (up to grid_extensions; the frontier's warm-up one of them at a budget
                  that runs every warm-up length), a two-way near tie on the extra selection
                  seeds, the runner-up on the evaluation seeds, the control's schedule on the evaluation
                  seeds where it beat a budget's own choice, and bracketing: the frontier's budgets 3,
                  4, ... up to frontier.max_budget, each with all of the above

A run's FLOPs are its arm's planned FLOPs at budget 1 (mltrain/method/cost.py, every phase of its plan)
times its budget. The hours are those FLOPs at a measured rate, plus each run's start-up, over the runs
that train at once (the local launcher's jobs): the seconds per FLOP of the study's own finished runs
where it has some, else the default measured here (MEASURED_CPU_S_PER_FLOP, how below).
tests/tools/test_study_planned.py checks "at most" and "planned now" against the planner's own functions
(plan.py, tuning.py) with every rule, and no adaptive rule, made to fire. A chain (an edge value that wins
and gets its own neighbours) can add a few runs beyond "at most".
Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from mltrain.tools.study.progress import measured, run_status
from mltrain.tools.study.schema import BUDGET, ArmConfig, StudyConfig, eval_seeds, frontier_arm, settings_count, tuned_keys

# One run's time on one core to itself: start-up + FLOPs x seconds per FLOP, fitted (least squares) to the
# process CPU time of six depth_ladder runs here, OMP_NUM_THREADS=1 as the study's local workers run
# (scripts/study_rate.py: 4, 8 and 16 blocks at budgets 0.25, 0.25, 0.1, two at a time; 7.7 to 19.3 s each,
# the fit within 0.1 s of every one): 1.74e10 FLOP/s and 4.9 s of start-up (Python, Hydra, data, model).
# CPU time, not wall time: the machine was shared (load 5-9 on 2 cores), so its wall clock ran 1.2-6.5x
# slower; the CPU time is what a run needs of a free core. docs/studies.md has the figures.
MEASURED_CPU_S_PER_FLOP = 1 / 1.74e10
MEASURED_START_S = 4.9
RATE_SOURCE = "measured here: depth_ladder runs' CPU time, 1 thread, scripts/study_rate.py"

ADAPTIVE = ("edge", "tie", "runner-up", "control wins", "bracketing")  # the neighbours of a grid LR always run


@dataclass(frozen=True)
class Item:
    """`runs` runs of one arm at one budget, added by one rule (`rule`: grid, control, evaluation, or
    one of ADAPTIVE); `bracketing`: at a budget only bracketing adds."""

    scale: str
    arm: str
    budget: float
    runs: int
    rule: str
    bracketing: bool = False

    @property
    def adaptive(self) -> bool:
        return self.rule in ADAPTIVE or self.bracketing


@dataclass(frozen=True)
class Count:
    runs: int
    flops: float


@dataclass(frozen=True)
class Plan:
    """The study's planned cost: its items, the runs and FLOPs planned now and at most."""

    items: tuple[Item, ...]
    now: Count
    most: Count

    def by_rule(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            rule = "bracketing" if item.bracketing else item.rule
            out[rule] = out.get(rule, 0) + item.runs
        return out


def _numeric_keys(arm: ArmConfig) -> int:
    """Tuned keys an edge can extend: two or more positive numbers."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
    return sum(1 for k in tuned_keys(arm) if len(arm.grid[k]) >= 2 and all(number(v) for v in arm.grid[k]))


def frontier_budgets(study: StudyConfig) -> tuple[list[float], list[float]]:
    """(the frontier's grid budgets, the budgets bracketing may add: the next whole multiples up to the cap)."""
    base = [float(b) for b in study.arms[frontier_arm(study)].grid[BUDGET]]
    cap, extra = study.frontier.max_budget, []
    nxt = float(math.floor(max(base)) + 1)
    while cap is not None and nxt <= cap + 1e-9:
        extra.append(nxt)
        nxt += 1
    return base, extra


def _adaptive(scale: str, arm: str, budget: float, study: StudyConfig, frontier: bool, bracketing: bool) -> list[Item]:
    """The runs the tuning rules add to one choice when each fires once."""
    cfg, sel, extra = study.arms[arm], len(study.selection_seeds), len(study.extra_selection_seeds)
    keys = _numeric_keys(cfg) + int(frontier and _warmups(study, budget) >= 2)  # the frontier's warm-up has an edge too
    items = [Item(scale, arm, budget, study.grid_extensions * keys * sel, "edge", bracketing)]
    if frontier and study.frontier.lr_neighbours:
        items.append(Item(scale, arm, budget, 2 * sel, "neighbours", bracketing))
    if extra and (study.frontier.ties or not frontier):
        items.append(Item(scale, arm, budget, 2 * extra, "tie", bracketing))
    return items


def _warmups(study: StudyConfig, budget: float) -> int:
    """Warm-up lengths the frontier's grid runs at a budget (successive halving keeps the best few above
    frontier.halving_from)."""
    f = study.frontier
    every = max(1, len(f.warmup_fractions))
    halved = f.halving_from is not None and budget > f.halving_from + 1e-9 and f.warmup_fractions
    return min(every, f.halving_keep) if halved else every


def scale_items(study: StudyConfig, scale: str) -> list[Item]:
    """Every run one rung can have, by arm, budget and rule (see the module docstring)."""
    f, control = frontier_arm(study), study.frontier.control_arm
    sel, evals = len(study.selection_seeds), len(eval_seeds(study, scale))
    base, more = frontier_budgets(study)
    items: list[Item] = []
    for budget in (*base, *more):
        late = budget in more
        items.append(Item(scale, f, budget, settings_count(study.arms[f]) * _warmups(study, budget) * sel, "grid", late))
        items += _adaptive(scale, f, budget, study, True, late)
        if control is not None:
            grid = settings_count(study.arms[control]) if study.frontier.control_grid else 1
            n = grid * len(study.frontier.control_length_factors)
            items.append(Item(scale, control, budget, n, "control", late))
            items.append(Item(scale, control, budget, evals, "control wins", late))  # beside the frontier's own
        items.append(Item(scale, f, budget, evals, "evaluation", late))
    for arm in study.arms:
        if arm == f:
            continue
        items.append(Item(scale, arm, 1.0, settings_count(study.arms[arm]) * sel, "grid"))
        items += _adaptive(scale, arm, 1.0, study, False, False)
        items.append(Item(scale, arm, 1.0, evals, "evaluation"))
        if study.extra_selection_seeds:
            items.append(Item(scale, arm, 1.0, evals, "runner-up"))
    return [i for i in items if i.runs]


def plan(study: StudyConfig, unit: Callable[[str, str], float]) -> Plan:
    """The study's planned cost; `unit(scale, arm)`: the planned FLOPs of one run of the arm at budget 1."""
    items = tuple(i for scale in study.ladder for i in scale_items(study, scale))

    def count(chosen: Iterable[Item]) -> Count:
        chosen = list(chosen)
        return Count(sum(i.runs for i in chosen), sum(i.runs * i.budget * unit(i.scale, i.arm) for i in chosen))
    return Plan(items, count(i for i in items if not i.adaptive), count(items))


# ---------------------------------------------------------------------------------------------
# The rate


@dataclass(frozen=True)
class Rate:
    s_per_flop: float  # one run's seconds per FLOP
    parallel: int  # runs that train at once
    source: str  # how it was measured
    start_s: float = MEASURED_START_S  # each run's start-up (its process, config, data, model)

    def hours(self, flops: float, runs: int = 0) -> float:
        return (flops * self.s_per_flop + runs * self.start_s) / self.parallel / 3600

    def text(self) -> str:
        per_run = 1 / self.s_per_flop
        both = f", {self.parallel} runs at once" if self.parallel > 1 else ""
        return f"{per_run:.3g} FLOP/s a run and {self.start_s:g} s start-up{both} ({self.source})"


def finished_totals(root: Path) -> tuple[float, float, int]:
    """(seconds, FLOPs, runs) of the finished runs under a study's folder (<scale>/<stage>/<arm>/<run>), each
    run's own clock and count."""
    seconds = flops = 0.0
    n = 0
    for summary_file in sorted(root.glob("*/*/*/*/summary.json")) if root.is_dir() else []:
        summary = run_status(summary_file.parent)
        taken = measured(summary) if summary and summary.get("status", "finished") == "finished" else None
        if taken is not None:
            seconds, flops, n = seconds + taken[0], flops + taken[1], n + 1
    return seconds, flops, n


def finished_rate(root: Path) -> Optional[tuple[float, int]]:
    """(seconds per FLOP, runs) of the finished runs under a study's folder; None where none has finished."""
    seconds, flops, n = finished_totals(root)
    return (seconds / flops, n) if flops > 0 and seconds > 0 else None


def took_line(name: str, root: Path) -> str:
    """A complete study's cost, as its finished runs measured it: runs, FLOPs, the runs' hours summed."""
    seconds, flops, n = finished_totals(root)
    return (f"study {name} took {n:,} finished runs, {flops:.3g} FLOPs, {_hours(seconds / 3600)} of run time "
            "(each run's own clock, summed; the machines' wall-clock is shorter where runs ran side by side)")


def study_rate(study: StudyConfig, root: Path) -> Rate:
    """The rate to plan with: the study's finished runs' own, else the measured default."""
    jobs = max(1, study.launcher.n_jobs or 1) if study.launcher.name == "local" else 1
    found = finished_rate(root)
    if found is not None:
        return Rate(found[0], jobs, f"measured: this study's {found[1]} finished run{'s' if found[1] != 1 else ''}")
    return Rate(MEASURED_CPU_S_PER_FLOP, jobs, RATE_SOURCE)


def summary_line(name: str, planned: Plan, rate: Rate) -> str:
    """One line: runs, FLOPs and hours, planned now ... at most, and the rate."""
    now, most = planned.now, planned.most
    return (f"study {name} plans {now.runs:,} runs, {now.flops:.3g} FLOPs, {_hours(rate.hours(now.flops, now.runs))} "
            f"now; at most {most.runs:,} runs, {most.flops:.3g} FLOPs, {_hours(rate.hours(most.flops, most.runs))} with "
            f"every tuning rule "
            f"and bracketing firing; at {rate.text()}")


def _hours(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"



def status_lines(name: str, cost: Plan, rate: Rate) -> list[str]:
    """`--status`'s cost lines: the summary, and the runs by rule (at most)."""
    rules = ", ".join(f"{rule} {n:,}" for rule, n in cost.by_rule().items())
    return [summary_line(name, cost, rate), f"  runs by rule (at most): {rules}"]
