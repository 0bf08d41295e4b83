"""The plan: a run as a flat list of phases, fixed at start-up; the run kind; the budget.

A run's depth method (method/registry.py) makes its plan for `budget_steps(cfg.train)` fine steps:
single-level training is one train phase of the fine model, multilevel training its cycles of coarse
phases and prolongations (method/multilevel.py), a rival method its stages of sub-path phases
(method/rivals.py). There is one loop for all of them: training/runner.py executes a plan.

A phase says all that its execution needs, so the runner knows no method by name. Each kind is a
record of its own, with the fields it needs and no others; every one has what `Phase` has: its kind,
its cycle, and whether the fine optimizer's state is cleared when it ends (`reset_fine_optimizer`).
A `TrainPhase`: the model it trains (`trains`: the fine one, through `paths` when given, or a coarse
model of the hierarchy), its optimizer (the fine one, or its own `OwnOptimizer`), its LR (the fine
schedule, or its own `PhaseSchedule` restarted at every phase), its batch stream, the step kind its
steps count as, the columns its train rows add and how often it writes one. Every other kind acts
between steps: `Evaluate`, `Grow` (here), multilevel's `Restrict`, `Diagnose` and `Prolong` (method/
multilevel.py), or a kind a method adds with its handler: a Phase subclass (a frozen dataclass too)
with the fields it needs.

The plan is executed from a position (phase index, step within the phase) that the runner owns
(training/runner.py `PlanPosition`, in its checkpoint state): the resumable "schedule position".
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields
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
    """What every entry of a plan has. `kind`: a PhaseKind (each built-in kind is a record of its own:
    TrainPhase, Evaluate, Grow, and multilevel's), or the name of a kind a method adds, with its handler
    (training/runner.py `phase_handler`), as a subclass with the fields it needs."""

    kind: str
    _: KW_ONLY
    cycle: Optional[int] = None  # the cycle it belongs to (None: outside the cycles)
    reset_fine_optimizer: bool = False  # when it ends, the fine optimizer's state is cleared

    def where(self) -> tuple[int, ...]:
        """The model the phase is of, by its path: () the fine one, (a,) coarse model a, (a, b) its coarse
        model b… (what its text in a checkpoint's plan and a stop line name)."""
        return ()


@dataclass(frozen=True, kw_only=True)
class TrainPhase(Phase):
    """Optimizer steps of one model. The defaults: the fine model with the fine optimizer, LR schedule and
    batches, as single-level training does."""

    kind: str = field(default=PhaseKind.train, init=False)
    steps: int
    trains: tuple[int, ...] = ()  # the model whose weights step: () the fine one, else that coarse model's path
    # the coarse model whose place in the plan the phase takes while training another (the schedule
    # control's fine steps in a coarse phase's place): what the phase's text and a stop line name
    stands_in_for: Optional[tuple[int, ...]] = None
    paths: Optional[PathPolicy] = None  # of the fine model: the sub-path each step runs (None: all its blocks)
    optimizer: Optional[OwnOptimizer] = None  # None: the fine optimizer
    schedule: Optional[PhaseSchedule] = None  # None: the fine LR schedule, at the run's fine step
    batches: str = BatchStream.fine  # a BatchStream, or a stream the method's parts add (training/parts.py)
    step_kind: str = StepKind.fine  # a StepKind, or a kind of step a method adds (counted by its name)
    columns: tuple[tuple[str, Any], ...] = ()  # (name, value) pairs every train row of the phase adds
    row_every: int = 0  # a train row every N steps of the phase and at its end; 0: every train.log_interval fine steps

    def where(self) -> tuple[int, ...]:
        return self.trains if self.stands_in_for is None else self.stands_in_for

    @property
    def row_columns(self) -> dict[str, Any]:
        return dict(self.columns)


@dataclass(frozen=True, kw_only=True)
class Evaluate(Phase):
    """The fine model's held-out loss, between steps (its row names the phase's cycle)."""

    kind: str = field(default=PhaseKind.evaluate, init=False)


@dataclass(frozen=True, kw_only=True)
class Grow(Phase):
    """The fine model's blocks copied into others (progressive stacking), optimizer state carried."""

    kind: str = field(default=PhaseKind.grow, init=False)
    growth: BlockCopies


# The fields the built-in records describe in a phase's text; a method's own kind's other fields are
# written as `name=value` (another value is another plan).
_DESCRIBED = frozenset({f.name for record in (Phase, TrainPhase, Evaluate, Grow) for f in fields(record)}
                       | {"coarse", "path"})  # multilevel's OnCoarse; the one record's field before the kinds


def phase_text(p: Phase) -> str:
    """A phase as a checkpoint names it in its plan (training/checkpoint.py): another text is another plan."""
    path = p.where()
    text = f"{p.kind} " + ("fine" if not path else "coarse " + ".".join(map(str, path)))
    if isinstance(p, TrainPhase):
        text += f" x{p.steps}"
    # a rival method's sub-paths and growths: another setting of them is another plan
    rule = p.paths if isinstance(p, TrainPhase) else p.growth if isinstance(p, Grow) else None
    text += f" {describe(rule)}" if rule is not None else ""
    # a method's own kind of phase: the fields it adds (another value of them is another plan)
    text += "".join(f" {f.name}={getattr(p, f.name)}" for f in fields(p) if f.name not in _DESCRIBED)
    return text + (f" (cycle {p.cycle})" if p.cycle is not None else "")


def where_stopped(phase: Optional[Phase], step_in_phase: int) -> str:
    """` (in cycle 3's coarse phase of model A, step 40 of 100)` for a run stopped inside a train phase of a
    model other than the fine one; `` otherwise."""
    if not isinstance(phase, TrainPhase) or not phase.where() or not 0 < step_in_phase < phase.steps:
        return ""
    return (f" (in cycle {phase.cycle}'s {phase.step_kind} phase of model {coarse_name(phase.where())}, step "
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


def train_phases(plan: list[Phase]) -> list[TrainPhase]:
    """The plan's train phases, in order."""
    return [p for p in plan if isinstance(p, TrainPhase)]


def planned_steps(plan: list[Phase]) -> int:
    """Optimizer steps of every level the plan takes."""
    return sum(p.steps for p in train_phases(plan))


def fine_steps(plan: list[Phase]) -> int:
    """Fine steps the plan takes: where the fine LR schedule ends and the last evaluation is."""
    return sum(p.steps for p in train_phases(plan) if p.step_kind == StepKind.fine)
