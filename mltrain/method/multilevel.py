"""Multilevel training (`coarsening=<scheme>`) and its schedule control (`multilevel.control=schedule`):
the paper's method, whole: its `multilevel` section (MultilevelConfig) and that section's checks, its
plan and the policy of every phase (which model trains with which optimizer, LR and batches, what its
rows add, what follows it). Its coarsening schemes are in coarsening.py; training/runner.py executes the
phases as they say.

One cycle at level l (the paper's, for levels=2; at level 0 followed by a held-out evaluation when
multilevel.eval_every_cycle):
    train the level-l model (fine_steps_per_cycle fine steps at level 0, coarse_steps at levels ≥ 1);
    then, if a coarser level exists, for each coarse model c of it (multilevel.order):
        restrict c  →  diagnostics (coarse vs parent)  →  cycle(c, l+1)  →  prolong c into level l.
n_cycles of those run first; fine-only training then continues to the run's fine steps
(train.max_steps × train.budget, plan.budget_steps).

The schedule control is the same plan with every coarse phase replaced by fine steps at the coarse LR
for the same FLOPs: it isolates what the high-LR phase alone does, with no coarse model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Callable, Optional, Protocol

from mltrain.core.checks import check_optim, check_schedule, positive
from mltrain.core.choice import Choice
from mltrain.core.errors import ConfigError
from mltrain.core.flops import train_flops_per_token
from mltrain.method.coarsening import build_scheme, scheme_class
from mltrain.method.kinds import BatchStream, PhaseKind, StepKind, coarse_name
from mltrain.method.plan import Evaluate, OwnOptimizer, Phase, PhaseSchedule, TrainPhase
from mltrain.method.registry import NONE, DepthMethod, register_method
from mltrain.method.settings import RunSettings
from mltrain.optim_settings import CoarseOptimConfig, OptimConfig, OptimName, ScheduleConfig, ScheduleName


class Order(Choice):
    ascending = "ascending"  # coarse model A (even blocks) first
    descending = "descending"


class StatePolicy(Choice):
    keep = "keep"
    reset = "reset"


class Control(Choice):
    none = "none"
    schedule = "schedule"  # the LR-schedule control (see MultilevelConfig.control)


@dataclass(frozen=True, kw_only=True)
class OnCoarse(Phase):
    """A phase that acts on one coarse model between steps (its handlers: runtime/multilevel.py)."""

    coarse: tuple[int, ...]  # the coarse model's path: (a,) coarse model a, (a, b) its coarse model b…

    def where(self) -> tuple[int, ...]:
        return self.coarse


@dataclass(frozen=True, kw_only=True)
class Restrict(OnCoarse):
    """The coarse model initialised from its parent (the scheme's restriction)."""

    kind: str = field(default=PhaseKind.restrict, init=False)


@dataclass(frozen=True, kw_only=True)
class Diagnose(OnCoarse):
    """The coarse model's loss and gradient agreement with its parent, measured, not trained."""

    kind: str = field(default=PhaseKind.diagnose, init=False)


@dataclass(frozen=True, kw_only=True)
class Prolong(OnCoarse):
    """The coarse model's weights carried back into its parent (the scheme's δ-prolongation)."""

    kind: str = field(default=PhaseKind.prolong, init=False)


@dataclass
class MultilevelConfig:
    """The `multilevel` section: the cycles, the coarse phases' optimizer, LR and batches, what happens to
    optimizer state, and the schedule control."""

    levels: int = 2  # 2 = fine + coarse; 3+ recurse (e.g. 12 -> 6 -> 3 blocks), a V-cycle
    # n_cycles and coarse_steps size the method to a run: every scale preset sets both (the paper's 35 and
    # 100 in conf/scale/paper.yaml); the schema's are the least a multilevel run does.
    n_cycles: int = 1
    fine_steps_per_cycle: int = 1
    coarse_steps: int = 1  # per coarse model, per cycle, at every coarse level
    delta: float = 0.25  # prolongation mix; for `average` it is Zou et al.'s alpha
    order: Order = Order.ascending  # which coarse model trains first
    coarse_batch_size: Optional[int] = None  # null: train.batch_size
    coarse_optim: CoarseOptimConfig = field(default_factory=CoarseOptimConfig)
    coarse_schedule: ScheduleConfig = field(default_factory=lambda: ScheduleConfig(name=ScheduleName.constant))
    coarse_optimizer_state: StatePolicy = StatePolicy.keep  # reset: at the start of every coarse phase
    fine_momentum_after_prolong: StatePolicy = StatePolicy.keep
    coarse_log_interval: int = 25  # coarse steps between coarse train rows
    diagnostics: bool = True  # diag/* each cycle: coarse vs fine loss and gradient cosine
    eval_every_cycle: bool = True  # val/loss of the fine model at the end of every cycle (not counted as training)
    # schedule: the LR-schedule control, which isolates what the coarse phases' optimizer and LR do
    # without a coarse model. Each coarse phase trains the *fine* model instead, with the coarse
    # optimizer and LR, for as many steps as cost the same FLOPs. Needs a coarsening scheme to know
    # those FLOPs; nothing is coarsened or prolonged.
    control: Control = Control.none


class MultilevelRun(RunSettings, Protocol):
    """The run's settings as a multilevel run reads them: the shared sections and the whole multilevel one."""

    @property
    def multilevel(self) -> MultilevelConfig: ...


def resolve_coarse_optim(fine: OptimConfig, coarse: CoarseOptimConfig) -> OptimConfig:
    """The coarse optimizer's settings: the fine ones with every non-null coarse field overriding them.
    Plain values (a list of betas, an OptimName), so the settings read from a composed config and from
    its typed object are equal."""
    merged = {f.name: getattr(fine, f.name) for f in fields(OptimConfig)}
    merged.update({f.name: getattr(coarse, f.name) for f in fields(CoarseOptimConfig)
                   if getattr(coarse, f.name) is not None})
    return OptimConfig(**{**merged, "name": OptimName(merged["name"]), "betas": list(merged["betas"])})


@register_method
class Multilevel(DepthMethod):
    """Coarse models trained in cycles and prolonged into the fine model (a coarsening scheme, no control)."""

    name = "multilevel"
    sections = ("multilevel", "coarsening")
    by_name = False
    parts = "mltrain.runtime.multilevel:MultilevelParts"  # the hierarchy, the coarse stream, the diagnostics
    cfg: MultilevelRun

    @classmethod
    def chosen(cls, cfg: RunSettings) -> bool:
        return (str(cfg.depth_method) == NONE and scheme_class(cfg.coarsening.scheme).coarsens
                and cfg.multilevel.control == cls.control)

    control = Control.none  # the multilevel.control value that chooses this method

    def check_config(self, total_steps: int) -> None:
        cfg = self.cfg
        c, ml = cfg.coarsening, cfg.multilevel
        if not 0.0 <= ml.delta <= 1.0 or math.isnan(ml.delta):
            raise ConfigError(f"multilevel.delta={ml.delta} must be in [0, 1]")
        if ml.levels < 2:
            raise ConfigError(f"multilevel.levels={ml.levels} must be >= 2 with coarsening={c.name}")
        for key in ("n_cycles", "fine_steps_per_cycle", "coarse_steps", "coarse_log_interval"):
            positive(getattr(ml, key), f"multilevel.{key}")
        if ml.coarse_batch_size is not None:
            positive(ml.coarse_batch_size, "multilevel.coarse_batch_size")
            if ml.coarse_batch_size % cfg.train.grad_accum:
                raise ConfigError(
                    f"multilevel.coarse_batch_size={ml.coarse_batch_size} must be divisible by "
                    f"train.grad_accum={cfg.train.grad_accum}"
                )
        fine_in_cycles = ml.n_cycles * ml.fine_steps_per_cycle
        if fine_in_cycles >= total_steps:
            # At least one fine step after the last prolongation, so the final losses describe the model
            # the run ends with.
            raise ConfigError(
                f"multilevel.n_cycles*fine_steps_per_cycle={fine_in_cycles} fine steps must be fewer than "
                f"train.max_steps={cfg.train.max_steps} x train.budget={cfg.train.budget} "
                "(fine training continues after the cycles)"
            )
        co = resolve_coarse_optim(cfg.optim, ml.coarse_optim)
        check_optim(co, "multilevel.coarse_optim")
        check_schedule(ml.coarse_schedule, "multilevel.coarse_schedule", co.lr)
        # The scheme checks its own keys: k, redraw/seed, step_scale, and that every level divides evenly.
        scheme_class(c.scheme).check_config(c, cfg.model.n_layer, ml.levels)

    def plan(self, total_steps: int) -> list[Phase]:
        """Its cycles, then fine training to `total_steps` fine steps."""
        ml, steps = self.cfg.multilevel, self.coarse_phase_steps()
        plan: list[Phase] = []
        for c in range(ml.n_cycles):
            plan += self._cycle((), c, steps)
            if ml.eval_every_cycle:  # held-out loss right after the cycle's last prolongation
                plan.append(Evaluate(cycle=c))
        rest = total_steps - ml.n_cycles * ml.fine_steps_per_cycle
        if rest > 0:
            plan.append(TrainPhase(steps=rest))
        return plan

    def coarse_phase_steps(self) -> Callable[[int], int]:
        """The steps of the next coarse phase at a level: coarse_steps, at every level."""
        return lambda level: self.cfg.multilevel.coarse_steps

    def _cycle(self, path: tuple[int, ...], c: int, coarse_steps: Callable[[int], int]) -> list[Phase]:
        """Cycle `c` at the level of `path`: train that model, then visit each of its coarse models
        (restrict, recurse into, prolong)."""
        ml, level = self.cfg.multilevel, len(path)
        phases: list[Phase] = [self.train_phase(path, c, ml.fine_steps_per_cycle if level == 0 else coarse_steps(level))]
        if level + 1 < ml.levels:
            for child in self._children():
                sub = path + (child,)
                phases += self.visit(sub, c, self._cycle(sub, c, coarse_steps))
        return phases

    def train_phase(self, path: tuple[int, ...], c: int, steps: int) -> TrainPhase:
        """The train phase of `path`'s model in cycle `c`. The fine model: fine steps with the fine
        optimizer, LR and batches, a train row after each (the jumps after a prolongation are the
        point). A coarse model: its own optimizer (multilevel.coarse_optim over optim, its state kept or
        reset at each phase by coarse_optimizer_state), its own LR schedule from step 0 of every phase
        (coarse_schedule), the coarse batch stream, a row every coarse_log_interval steps."""
        cycle = (("cycle", c),)
        if not path:
            return TrainPhase(steps=steps, cycle=c, columns=cycle, row_every=1)
        ml = self.cfg.multilevel
        settings, schedule = self._coarse_settings
        return TrainPhase(steps=steps, cycle=c, trains=path,
                     optimizer=OwnOptimizer(path, settings, ml.coarse_optimizer_state == StatePolicy.reset),
                     schedule=schedule, batches=BatchStream.coarse, step_kind=StepKind.coarse,
                     columns=(*cycle, ("coarse_model", path[-1])), row_every=int(ml.coarse_log_interval))

    @cached_property
    def _coarse_settings(self) -> tuple[OptimConfig, PhaseSchedule]:
        """The coarse optimizer's settings and LR schedule, read once for the whole plan."""
        ml = self.cfg.multilevel
        co, s = resolve_coarse_optim(self.cfg.optim, ml.coarse_optim), ml.coarse_schedule
        return co, PhaseSchedule(str(s.name), int(s.warmup_steps), float(s.min_lr), float(co.lr))

    def visit(self, sub: tuple[int, ...], c: int, inner: list[Phase]) -> list[Phase]:
        """Coarse model `sub` in cycle `c` around its own cycle `inner`: restrict it from its parent,
        measure the diagnostics (multilevel.diagnostics), train, prolong it into its parent (after which,
        into the fine model, fine_momentum_after_prolong=reset clears the fine optimizer's state)."""
        phases: list[Phase] = [Restrict(coarse=sub, cycle=c)]
        if self.cfg.multilevel.diagnostics:
            phases.append(Diagnose(coarse=sub, cycle=c))
        return [*phases, *inner, Prolong(coarse=sub, cycle=c, reset_fine_optimizer=self._resets_fine(sub))]

    def _resets_fine(self, sub: tuple[int, ...]) -> bool:
        return len(sub) == 1 and self.cfg.multilevel.fine_momentum_after_prolong == StatePolicy.reset

    def batch_sizes(self) -> dict[str, int]:
        return {"multilevel.coarse_batch_size": self.cfg.multilevel.coarse_batch_size or self.cfg.train.batch_size}

    def summary_fields(self, state: Any, fine_step_flops: float) -> dict[str, Any]:
        """Its steps of each kind and their FLOPs, in fine steps too (what mltrain-compare sets against
        the single-level runs), and the prolongation's delta."""
        steps, flops = state.steps, state.kind_flops
        return {**super().summary_fields(state, fine_step_flops), "delta": self.cfg.multilevel.delta, "coarse_steps": steps.get(StepKind.coarse.value, 0),
                "coarse_flops": flops.get(StepKind.coarse.value, 0.0),
                "control_steps": steps.get(StepKind.control.value, 0),
                "fine_equivalent_steps": state.flops / fine_step_flops}

    def identity(self) -> dict[str, Any]:
        c = self.cfg
        return {"coarsening.scheme": c.coarsening.scheme, "coarsening.k": c.coarsening.k,
                "coarsening.step_scale": c.coarsening.step_scale, "multilevel.levels": c.multilevel.levels}

    def _children(self) -> list[int]:
        """The coarse models of one level, in the order multilevel.order trains them."""
        children = list(range(build_scheme(self.cfg.coarsening).n_coarse_models))
        return children[::-1] if self.cfg.multilevel.order == Order.descending else children


@register_method
class ScheduleControl(Multilevel):
    """The multilevel plan with every coarse phase replaced by fine steps of the fine model at the coarse
    optimizer and LR, for as many steps as cost the same FLOPs (multilevel.control=schedule): isolates
    what the high-LR phase alone does, with no coarse model. Needs a coarsening scheme to know those
    FLOPs; nothing is coarsened or prolonged."""

    name = "schedule_control"
    control = Control.schedule

    def coarse_phase_steps(self) -> Callable[[int], int]:
        return ControlSteps(self.cfg).next

    def train_phase(self, path: tuple[int, ...], c: int, steps: int) -> TrainPhase:
        """A coarse phase's stand-in: its optimizer, LR, batches and rows, stepping the fine model; its rows
        name the coarse model it stands in for (`control_for`)."""
        phase = super().train_phase(path, c, steps)
        if not path:
            return phase
        return replace(phase, trains=(), stands_in_for=path, step_kind=StepKind.control,
                       columns=(("cycle", c), ("control_for", coarse_name(path))))

    def visit(self, sub: tuple[int, ...], c: int, inner: list[Phase]) -> list[Phase]:
        """The stand-in phases alone (nothing to restrict, measure or prolong); the last one clears the
        fine optimizer's state where the multilevel plan's prolongation would."""
        if self._resets_fine(sub):
            inner[-1] = replace(inner[-1], reset_fine_optimizer=True)
        return inner


def control_ratio(cfg: RunSettings, level: int) -> float:
    """FLOPs of one level-`level` coarse step over one fine step (same batch size)."""
    m, scheme = cfg.model, build_scheme(cfg.coarsening)
    if m.vocab_size is None:
        raise ValueError("model.vocab_size is unset: the control ratio needs the tokenizer's vocabulary")
    depth = m.n_layer
    for _ in range(level):
        depth = scheme.coarse_depth(depth)
    coarse = train_flops_per_token(depth, m.n_embd, m.vocab_size, m.block_size)
    fine = train_flops_per_token(m.n_layer, m.n_embd, m.vocab_size, m.block_size)
    return coarse / fine


def control_steps(cfg: MultilevelRun, level: int) -> int:
    """Fine steps that cost the same FLOPs as one phase of `coarse_steps` level-`level` coarse steps
    (rounded; the plan spreads the rounding over the run, see ControlSteps)."""
    return max(1, round(cfg.multilevel.coarse_steps * control_ratio(cfg, level)))


class ControlSteps:
    """Fine-step counts for the schedule control's phases that match the coarse phases' FLOPs over the
    whole run: phase i of a level gets round(i · x) - round((i-1) · x) steps, x = coarse_steps × the
    coarse/fine cost ratio, so the total is within half a step of the coarse FLOPs it replaces instead
    of drifting by up to half a step per phase."""

    def __init__(self, cfg: MultilevelRun):
        self.cfg = cfg
        self.done: dict[int, tuple[int, int]] = {}  # level -> (phases so far, steps so far)

    def next(self, level: int) -> int:
        phases, steps = self.done.get(level, (0, 0))
        target = round((phases + 1) * self.cfg.multilevel.coarse_steps * control_ratio(self.cfg, level))
        n = target - steps
        self.done[level] = (phases + 1, target)
        return n
