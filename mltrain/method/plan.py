"""The plan: a run as a flat list of phases, fixed at start-up; the run kind; the budget.

A run's depth method (method/registry.py) makes its plan for `budget_steps(cfg.train)` fine steps:
single-level training is one train phase of the fine model, multilevel training its cycles of coarse
phases and prolongations (method/multilevel.py), a rival method its stages of sub-path phases
(method/rivals.py). There is one loop for all of them: training/runner.py executes a plan.

A phase says all that its execution needs, so the runner knows no method by name. A train phase: the
model it trains (`trains`: the fine one, through `paths` when given, or a coarse model of the
hierarchy), its optimizer (the fine one, or its own `OwnOptimizer`), its LR (the fine schedule, or
its own `PhaseSchedule` restarted at every phase), its batch stream, the step kind its steps count as,
the columns its train rows add and how often it writes one. Every other kind acts between steps
(restrict, diagnose, prolong, evaluate, grow, or a kind a method adds with its handler); any phase may
clear the fine optimizer's state when it ends (`reset_fine_optimizer`). A method that needs more
fields for a kind of its own subclasses Phase (a frozen dataclass too).

The plan is executed with a position (phase index, step within the phase) kept in TrainState: the
resumable "schedule position".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from mltrain.method.kinds import BatchStream, PhaseKind, RunKind, StepKind, coarse_name
from mltrain.method.paths import BlockCopies, PathPolicy, describe
from mltrain.method.registry import method_for
from mltrain.method.settings import RunSettings, TrainSteps
from mltrain.optim_settings import OptimConfig


@dataclass(frozen=True)
class OwnOptimizer:
    """A train phase's own optimizer (not the fine one): one per `key`, made at its first phase over
    every fine parameter (plus the trained view's own storage), kept from phase to phase; with `reset`
    its state is cleared at the start of each phase (not when a phase resumes mid-way)."""

    key: tuple[int, ...]  # one optimizer per key; a checkpoint keeps its state under this key
    settings: OptimConfig  # its optim.* settings (name, lr, momentum, ...)
    reset: bool = False


@dataclass(frozen=True)
class PhaseSchedule:
    """A train phase's own LR schedule: `name`/`warmup_steps`/`min_lr` as in `schedule.*`, from `peak_lr`,
    over the phase's steps, restarted at every phase."""

    name: str
    warmup_steps: int
    min_lr: float
    peak_lr: float


@dataclass(frozen=True)
class Phase:
    kind: str  # a PhaseKind, or the name of a kind a method adds (with its handler: training/runner.py)
    path: tuple[int, ...] = ()  # which model: () fine, (a,) coarse model a, (a, b) its coarse model b…
    steps: int = 0
    cycle: Optional[int] = None
    paths: Optional[PathPolicy] = None  # train phases of the fine model: the sub-path each step runs (None: all)
    growth: Optional[BlockCopies] = None  # grow phases: how the fine model's blocks are copied
    # -- how a train phase trains (the defaults: the fine model, as single-level training does)
    trains: tuple[int, ...] = ()  # the model whose weights step: () the fine one, else that coarse model's path
    optimizer: Optional[OwnOptimizer] = None  # None: the fine optimizer
    schedule: Optional[PhaseSchedule] = None  # None: the fine LR schedule, at the run's fine step
    batches: str = BatchStream.fine  # a BatchStream, or a stream the method's parts add (training/parts.py)
    step_kind: str = StepKind.fine  # a StepKind, or a kind of step a method adds (counted by its name)
    columns: tuple[tuple[str, Any], ...] = ()  # (name, value) pairs every train row of the phase adds
    row_every: int = 0  # a train row every N steps of the phase and at its end; 0: every train.log_interval fine steps
    # -- what happens when the phase ends
    reset_fine_optimizer: bool = False  # the fine optimizer's state is cleared

    @property
    def level(self) -> int:
        return len(self.path)

    @property
    def row_columns(self) -> dict[str, Any]:
        return dict(self.columns)


_PHASE_FIELDS = frozenset(f.name for f in fields(Phase))


def phase_text(p: Phase) -> str:
    """A phase as a checkpoint names it in its plan (training/checkpoint.py): another text is another plan."""
    where = "fine" if not p.path else "coarse " + ".".join(map(str, p.path))
    text = f"{p.kind} {where}" + (f" x{p.steps}" if p.kind == PhaseKind.train else "")
    # a rival method's sub-paths and growths: another setting of them is another plan
    text += "".join(f" {describe(rule)}" for rule in (p.paths, p.growth) if rule is not None)
    # a method's own kind of phase: the fields it adds (another value of them is another plan)
    text += "".join(f" {f.name}={getattr(p, f.name)}" for f in fields(p) if f.name not in _PHASE_FIELDS)
    return text + (f" (cycle {p.cycle})" if p.cycle is not None else "")


def where_stopped(phase: Optional[Phase], step_in_phase: int) -> str:
    """` (in cycle 3's coarse phase of model A, step 40 of 100)` for a run stopped inside a train phase of a
    model other than the fine one; `` otherwise."""
    if phase is None or phase.kind != PhaseKind.train or not phase.path or not 0 < step_in_phase < phase.steps:
        return ""
    return (f" (in cycle {phase.cycle}'s {phase.step_kind} phase of model {coarse_name(phase.path)}, step "
            f"{step_in_phase} of {phase.steps})")


def budget_steps(train: TrainSteps) -> int:
    """The fine steps a run trains for: train.max_steps x train.budget, at least 1. The one place the
    budget is applied: the plan is built with it and everything else (the LR schedule, the last
    evaluation, the summary) takes the fine steps from the plan; the config itself is never changed."""
    return max(1, round(train.max_steps * train.budget))


def run_kind(cfg: RunSettings) -> RunKind:
    """What a run trains, from its config: the one rule (summary.json and run.json record it)."""
    return RunKind(method_for(cfg).name)


def build_plan(cfg: RunSettings) -> list[Phase]:
    """The phases of a run: its method's plan for `budget_steps(cfg.train)` fine steps."""
    return method_for(cfg).plan(budget_steps(cfg.train))


def planned_steps(plan: list[Phase]) -> int:
    """Optimizer steps of every level the plan takes."""
    return sum(p.steps for p in plan)


def fine_steps(plan: list[Phase]) -> int:
    """Fine steps the plan takes: where the fine LR schedule ends and the last evaluation is."""
    return sum(p.steps for p in plan if p.kind == PhaseKind.train and p.step_kind == StepKind.fine)
