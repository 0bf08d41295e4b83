"""The plan: a run as a flat list of phases, fixed at start-up; the run kind; the budget.

A run's depth method (method/registry.py) makes its plan for `budget_steps(cfg.train)` fine steps:
single-level training is one train phase of the fine model, multilevel training its cycles of coarse
phases and prolongations (method/multilevel.py), a rival method its stages of sub-path phases
(method/rivals.py). There is one loop for all of them: training/runner.py executes a plan.

The plan is executed with a position (phase index, step within the phase) kept in TrainState: the
resumable "schedule position".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mltrain.method.kinds import PhaseKind, RunKind
from mltrain.method.paths import BlockCopies, PathPolicy
from mltrain.method.registry import method_for


@dataclass(frozen=True)
class Phase:
    kind: PhaseKind
    path: tuple[int, ...] = ()  # which model: () fine, (a,) coarse model a, (a, b) its coarse model b…
    steps: int = 0
    cycle: Optional[int] = None
    paths: Optional[PathPolicy] = None  # train phases of the fine model: the sub-path each step runs (None: all)
    growth: Optional[BlockCopies] = None  # grow phases: how the fine model's blocks are copied

    @property
    def level(self) -> int:
        return len(self.path)


def budget_steps(train: Any) -> int:
    """The fine steps a run trains for: train.max_steps x train.budget, at least 1. The one place the
    budget is applied: the plan is built with it and everything else (the LR schedule, the last
    evaluation, the summary) takes the fine steps from the plan; the config itself is never changed."""
    return max(1, round(train.max_steps * train.budget))


def run_kind(cfg: Any) -> RunKind:
    """What a run trains, from its config: the one rule (summary.json and run.json record it)."""
    return RunKind(method_for(cfg).name)


def build_plan(cfg: Any) -> list[Phase]:
    """The phases of a run: its method's plan for `budget_steps(cfg.train)` fine steps."""
    return method_for(cfg).plan(budget_steps(cfg.train))


def planned_steps(plan: list[Phase]) -> int:
    """Optimizer steps of every level the plan takes."""
    return sum(p.steps for p in plan)


def fine_steps(plan: list[Phase]) -> int:
    """Fine steps the plan takes: where the fine LR schedule ends and the last evaluation is."""
    return sum(p.steps for p in plan if p.kind == PhaseKind.train and not p.path)
