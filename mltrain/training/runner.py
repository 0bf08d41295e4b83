"""Executes a plan (method/plan.py) with one Trainer. Each phase says what to do (which model trains,
with which optimizer, LR and batches, what its rows add, what follows it); the runner does it and knows
no method by name.

A train phase is one loop of `Trainer.train_step` calls, in `PlanRunner.run` itself; every other phase goes
to the handler its kind names: the run's parts' own (training/parts.py: a method's build hook makes
them) or PHASE_HANDLERS (evaluate, grow here). A method that plans a kind of phase of its own gives its
handler in its parts, or registers it with `@phase_handler("<kind>")` in its own module (this layer
imports none). The runner owns its position in the plan (`PlanPosition`: the phase index, the steps
taken of that phase), saved in its `state_dict()`, so a run stopped anywhere continues exactly where it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import torch

from mltrain.core.errors import ConfigError
from mltrain.model.gpt import GPT
from mltrain.model.views import ModelView, key_path, path_key, path_view
from mltrain.method.kinds import PhaseKind, RunKind, StepKind
from mltrain.method.paths import PathPolicy, SubPath
from mltrain.method.plan import (Grow, OwnOptimizer, Phase, PhaseSchedule, TrainPhase, budget_steps, fine_steps,
                                 train_phases)
from mltrain.method.registry import method_for
from mltrain.training.evaluation import Evaluator
from mltrain.training.growth import copy_blocks
from mltrain.training.optim import LRSchedule, build_optimizer
from mltrain.training.parts import Parts
from mltrain.training.run_config import RunConfig
from mltrain.training.trainer import Trainer


@dataclass
class PlanPosition:
    """Where a runner stands in its plan: the index of the phase it is in and the steps of that phase
    taken (a train phase's; 0 for any other). The runner's own record: the trainer counts steps and
    FLOPs, the runner alone moves through the plan."""

    phase_index: int = 0
    step_in_phase: int = 0

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> "PlanPosition":
        return cls(int(state["phase_index"]), int(state["step_in_phase"]))


# The position's entries, which a checkpoint written before the runner owned its position holds among
# the train state's counters (`train_state`).
POSITION = ("phase_index", "step_in_phase")


@dataclass
class PhaseContext:
    """What a phase handler works with, and all it is given (not the runner): the fine model, the fine
    optimizer, `emit(row)` for a metrics row, `counters()` for the columns every row carries (FLOPs,
    tokens, time), the run's fine `step` and `seed`, `evaluate(**columns)` for the fine model's held-out
    loss (an eval row), and `should_stop()` for a phase long enough to stop inside (then it returns
    False, and its position resumes it)."""

    model: GPT
    fine_optimizer: torch.optim.Optimizer
    emit: Callable[[dict], None]
    counters: Callable[[], dict]
    step: int
    seed: int
    evaluate: Callable[..., float]
    should_stop: Callable[[], bool]


PhaseHandler = Callable[[PhaseContext, Phase], bool]
# The handler of each kind of phase but `train`: `handler(ctx, phase)` carries the phase out between two
# steps; False when `ctx.should_stop()` ended it early (its position then resumes it).
PHASE_HANDLERS: dict[str, PhaseHandler] = {}
# The measurers' counters (the evaluator's, the method's own measurements'), which a file written before
# each measurer kept its own holds among the train state's counters.
MEASURED = ("eval_flops", "diag_flops")


def phase_handler(kind: str) -> Callable[[PhaseHandler], PhaseHandler]:
    """Decorator: register `fn(ctx, phase) -> bool` (ctx: PhaseContext) as the handler of the phases of `kind`."""
    if str(kind) == PhaseKind.train:
        raise ValueError("train phases are PlanRunner.run's own loop; register a handler for another kind")

    def register(fn: PhaseHandler) -> PhaseHandler:
        PHASE_HANDLERS[str(kind)] = fn
        return fn

    return register


class ViewsAhead:
    """The views a sub-path policy names for the steps of a phase, made for the next AHEAD steps at once:
    the policy's `paths` of those steps in one call (drawn together), and one view for a run of steps with
    the same sub-path (a fixed prefix, say, is one view for all its steps)."""

    AHEAD = 64

    def __init__(self, policy: PathPolicy, model: GPT):
        self.policy, self.model = policy, model
        self._start, self._views = 0, list[ModelView]()

    def view(self, step: int) -> ModelView:
        i = step - self._start
        if not 0 <= i < len(self._views):
            self._start, i = step, 0
            self._views, last = [], None
            for sub in self.policy.paths(step, self.AHEAD):
                if sub != last or not self._views:
                    last, view = sub, path_view(self.model, sub)
                self._views.append(view)
        return self._views[i]


@dataclass
class Training:
    """What one train phase's steps use, looked up once at its start (the step loop reads plain values):
    the view (or, with sub-paths, the views `ahead`), the view its held-out loss is measured on, the
    optimizer, the batch stream, the LR schedule (at the run's fine step, or at the step of the phase)
    and the rows' extra columns."""

    view: ModelView
    ahead: Optional[ViewsAhead]
    eval_view: ModelView
    optimizer: torch.optim.Optimizer
    sampler: Any
    schedule: LRSchedule
    at_fine_step: bool
    columns: dict


class PlanRunner:
    """Executes the plan of `cfg` with one Trainer. Owns the optimizers: the fine one, and the ones that
    phases of the plan have of their own (per `OwnOptimizer.key`). `parts`: what the run's depth method
    built beyond the fine model (its views, batch streams and handlers); `fine_stream` the fine batches."""

    def __init__(self, cfg: RunConfig, trainer: Trainer, evaluator: Evaluator, parts: Parts,
                 fine_optimizer: torch.optim.Optimizer, fine_stream: Any, device: torch.device):
        self.cfg, self.trainer, self.evaluator, self.parts = cfg, trainer, evaluator, parts
        self.fine = parts.fine
        self.fine_optimizer, self.device = fine_optimizer, device
        self.streams: dict[str, Any] = {"fine": fine_stream, **parts.streams}  # by the name a phase's `batches` gives
        self.method = method_for(cfg)
        self.kind = RunKind(self.method.name)
        self.plan: list[Phase] = self.method.plan(budget_steps(cfg.train))
        self.handlers: dict[str, PhaseHandler] = {**PHASE_HANDLERS, **parts.handlers()}
        self._check_plan()
        self.last_fine_step = fine_steps(self.plan)  # train.max_steps x train.budget
        # Schedules and intervals read from the config once: the step loop reads plain Python values.
        self.fine_schedule = LRSchedule.from_config(cfg.schedule, cfg.optim.lr, self.last_fine_step)
        self._phase_schedules: dict[tuple[PhaseSchedule, int], LRSchedule] = {}  # by spec and phase length
        self.log_every, self.eval_every = int(cfg.train.log_interval), int(cfg.train.eval_interval)
        self.own_optimizers: dict[tuple[int, ...], torch.optim.Optimizer] = {}
        self.position = PlanPosition()  # where in the plan the run stands: the runner's alone

    def _check_plan(self) -> None:
        """ConfigError before any step when a phase names a kind without a handler or a batch stream the
        run does not have."""
        unknown = sorted({str(p.kind) for p in self.plan} - {PhaseKind.train.value, *self.handlers})
        if unknown:
            raise ConfigError(f"depth method {self.kind} plans phases of kind {', '.join(unknown)} that have no "
                              "handler (register one with mltrain.training.runner.phase_handler)")
        if any(p.kind == PhaseKind.train and not isinstance(p, TrainPhase) for p in self.plan):
            raise ConfigError(f"depth method {self.kind} plans a train phase that is no TrainPhase "
                              "(mltrain.method.plan.TrainPhase: its steps, model, optimizer, LR and batches)")
        missing = sorted({str(p.batches) for p in train_phases(self.plan)} - set(self.streams))
        if missing:
            raise ConfigError(f"depth method {self.kind} plans train phases on batch stream(s) {', '.join(missing)} "
                              "that its run does not build (training/parts.py Parts.streams)")

    # -- which model, optimizer, LR and batches a train phase uses -----------------------------------
    def view_for(self, phase: TrainPhase) -> ModelView:
        """The view a train phase trains (with sub-paths: the fine model they are drawn from)."""
        return self.parts.view(phase.trains, phase.cycle or 0) if phase.trains else self.fine

    def own_optimizer(self, phase: TrainPhase, view: ModelView, phase_start: bool) -> torch.optim.Optimizer:
        """The phase's own optimizer; with `reset` its state is cleared at the start of every phase of it
        (not when a phase resumes mid-way)."""
        spec = _own_optimizer_spec(phase)
        opt = self.own_optimizers.get(spec.key)
        if opt is None:
            opt = self._new_optimizer(phase, view)
        elif phase_start and spec.reset:
            opt.state.clear()
        return opt

    def _new_optimizer(self, phase: TrainPhase, view: ModelView) -> torch.optim.Optimizer:
        """One optimizer per key. It holds every fine parameter (plus the blocks the view owns, if any):
        parameters outside the current view get no gradient and are skipped, so a view whose blocks
        change from phase to phase keeps per-parameter state."""
        params = list(self.trainer.model.parameters())
        if view.owns_blocks:
            params += [p for b in view.blocks for p in b.parameters()]
        spec = _own_optimizer_spec(phase)
        opt = build_optimizer(params, spec.settings, self.device)
        self.own_optimizers[spec.key] = opt
        return opt

    def storage(self) -> list[torch.nn.Module]:
        """The modules the plan's views own beyond the fine model, made now, so that a data-parallel
        wrapper built next covers them (see mltrain/training/distributed.py)."""
        return self.parts.storage(self.plan)

    def fine_lr(self) -> float:
        return self.fine_schedule(self.trainer.state.fine_steps)

    def phase_schedule(self, spec: PhaseSchedule, phase_steps: int) -> LRSchedule:
        key = (spec, phase_steps)
        if key not in self._phase_schedules:
            self._phase_schedules[key] = LRSchedule(spec.name, spec.warmup_steps, spec.min_lr, spec.peak_lr, phase_steps)
        return self._phase_schedules[key]

    def training(self, phase: TrainPhase) -> Training:
        """What the steps of train phase `phase` use, from where the run stands in it."""
        view, paths = self.view_for(phase), phase.paths
        optimizer = self.fine_optimizer
        if phase.optimizer is not None:
            optimizer = self.own_optimizer(phase, view, self.position.step_in_phase == 0)
        schedule = self.fine_schedule if phase.schedule is None else self.phase_schedule(phase.schedule, phase.steps)
        eval_view = view if paths is None else self.path_view(paths.eval_path())
        ahead = None if paths is None else ViewsAhead(paths, self.trainer.model)
        return Training(view, ahead, eval_view, optimizer, self.streams[str(phase.batches)], schedule,
                        phase.schedule is None, phase.row_columns)

    # -- execution ----------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] = lambda: False,
            after_step: Callable[[str], None] = lambda kind: None) -> bool:
        """Execute the plan from the current position. Returns False when `should_stop()` (checked
        between steps: a signal, say) ended it early: the position then says exactly where to resume,
        mid-phase or not. `after_step(kind)` is called after every optimizer step and its rows, at a point
        where `state_dict()` is a valid resume point (where checkpoints are taken). A train phase's steps
        are this loop's own; any other phase is its kind's handler's (given a PhaseContext)."""
        state, at = self.trainer.state, self.position
        while at.phase_index < len(self.plan):
            if should_stop():
                return False
            phase = self.plan[at.phase_index]
            if isinstance(phase, TrainPhase):
                t, kind = self.training(phase), str(phase.step_kind)  # counted by its plain name
                while at.step_in_phase < phase.steps:
                    view = t.view if t.ahead is None else t.ahead.view(state.fine_steps)  # this step's sub-path
                    lr = t.schedule(state.fine_steps if t.at_fine_step else at.step_in_phase)
                    self.trainer.train_step(view, t.optimizer, lr, t.sampler, kind)
                    at.step_in_phase += 1
                    self._rows_after_step(phase, view, t, lr)
                    after_step(kind)
                    if at.step_in_phase < phase.steps and should_stop():
                        return False
            elif not self.handlers[str(phase.kind)](self.phase_context(should_stop), phase):
                return False
            if phase.reset_fine_optimizer:
                self.fine_optimizer.state.clear()
            at.phase_index += 1
            at.step_in_phase = 0
        return True

    def phase(self) -> Optional[Phase]:
        """The phase the run stands in (None: the plan has ended)."""
        i = self.position.phase_index
        return self.plan[i] if i < len(self.plan) else None

    def phase_context(self, should_stop: Callable[[], bool]) -> PhaseContext:
        """What a handler of a phase is given, as the run stands now."""
        t = self.trainer
        return PhaseContext(t.model, self.fine_optimizer, t.emit, t.counters, t.state.fine_steps, int(self.cfg.seed),
                            lambda **columns: self.evaluator.log_eval(self.fine, **columns), should_stop)

    def _rows_after_step(self, phase: TrainPhase, view: ModelView, t: Training, lr: float) -> None:
        """The phase's train row when one is due: every `row_every` steps of the phase and at its end; with
        row_every 0, for fine steps every train.log_interval fine steps of the run and at the last (for
        other steps every train.log_interval steps of the phase and at its end). After a fine step, a
        held-out evaluation every train.eval_interval fine steps and at the last (on `t.eval_view`: a
        sub-path method's whole model)."""
        kind, k = str(phase.step_kind), self.position.step_in_phase
        n, fine = self.trainer.state.fine_steps, kind == StepKind.fine
        if phase.row_every or not fine:
            due = k % (phase.row_every or self.log_every) == 0 or k == phase.steps
        else:
            due = n % self.log_every == 0 or n == self.last_fine_step
        if due:
            self.trainer.log_train(kind, view, lr, k, **t.columns)
        if fine and (n % self.eval_every == 0 or n == self.last_fine_step):
            self.evaluator.log_eval(t.eval_view)

    def path_view(self, sub: Optional[SubPath]) -> ModelView:
        """The view of the fine model a sub-path names (None: the fine model)."""
        return self.fine if sub is None else path_view(self.trainer.model, sub)

    # -- resumable state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this runner is: weights, every optimizer, the plan
        position and the batch streams' positions (the runner's own), and each owner's share, one flat
        mapping: the trainer's (counters, clock, rows not yet written), the evaluator's and the parts'
        (training/parts.py); the RNG states."""
        return {
            "model": self.trainer.model.state_dict(),
            "fine_optimizer": self.fine_optimizer.state_dict(),
            "own_optimizers": {path_key(p): opt.state_dict() for p, opt in self.own_optimizers.items()},
            "position": self.position.state_dict(),
            "samplers": {name: stream.state_dict() for name, stream in self.streams.items()},
            **self.trainer.state_dict(),
            **self.evaluator.state_dict(),
            **self.parts.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a runner built from the same config (same plan) to the saved position."""
        t = self.trainer
        t.model.load_state_dict(state["model"])
        self.fine_optimizer.load_state_dict(state["fine_optimizer"])
        self.parts.load_state_dict({**{k: v for k, v in state["train_state"].items() if k in MEASURED}, **state})
        first: dict[tuple[int, ...], TrainPhase] = {}  # each own optimizer's first phase: the view it is made for
        for p in train_phases(self.plan):
            if p.optimizer is not None:
                first.setdefault(p.optimizer.key, p)
        for key, opt_state in state["own_optimizers"].items():
            phase = first[key_path(key)]
            self._new_optimizer(phase, self.view_for(phase)).load_state_dict(opt_state)
        counters = dict(state["train_state"])
        # a file written before the measurers kept their own counters (or the runner its position) has
        # them among the train state's
        measured = {key: counters.pop(key) for key in MEASURED if key in counters}
        earlier = {key: counters.pop(key) for key in POSITION if key in counters}
        at = PlanPosition.from_state(state.get("position", earlier))
        self.position.phase_index, self.position.step_in_phase = at.phase_index, at.step_in_phase
        t.load_state_dict({**state, "train_state": counters})
        self.evaluator.load_state_dict({**measured, **state})
        for name, stream in self.streams.items():
            stream.load_state_dict(state["samplers"][name])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])


def _own_optimizer_spec(phase: TrainPhase) -> OwnOptimizer:
    """The own optimizer a phase names (ConfigError for one that names none: it trains with the fine one)."""
    if phase.optimizer is None:
        raise ConfigError(f"a {phase.kind} phase on {phase.trains} has no optimizer of its own")
    return phase.optimizer


# -- the built-in kinds of phase ---------------------------------------------------------------------
@phase_handler(PhaseKind.evaluate)
def _evaluate(ctx: PhaseContext, phase: Phase) -> bool:
    ctx.evaluate(cycle=phase.cycle)
    return True


@phase_handler(PhaseKind.grow)
def _grow(ctx: PhaseContext, phase: Phase) -> bool:
    if not isinstance(phase, Grow):
        raise ConfigError(f"a grow phase at cycle {phase.cycle} is no Grow record: it says no block copies")
    copy_blocks(ctx.model, ctx.fine_optimizer, phase.growth)
    return True
