"""Executes a plan (method/plan.py) with one Trainer: which model, optimizer, LR and batches each phase
uses, and the rows due after each step.

Each phase goes to the handler its PhaseKind names in `PlanRunner.handlers`; a method with phases of
its own adds a handler there. A train phase is one loop of `Trainer.train_step` calls over the view the
phase names; every other phase acts between steps (restrict, diagnose, prolong, evaluate). The position
in the plan (phase index, step within the phase) lives in TrainState, so a run stopped anywhere
continues from `state_dict()` exactly where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from mltrain.model import GPT
from mltrain.views import Hierarchy, ModelView, fine_view, key_path, path_key, path_view
from mltrain.method.kinds import PhaseKind, RunKind, StepKind, coarse_name
from mltrain.method.multilevel import StatePolicy, resolve_coarse_optim
from mltrain.method.paths import PathPolicy, SubPath
from mltrain.method.plan import Phase, build_plan, fine_steps, run_kind
from mltrain.training.diagnostics import Diagnostics
from mltrain.training.evaluation import Evaluator
from mltrain.training.growth import copy_blocks
from mltrain.training.optim import LRSchedule, build_optimizer
from mltrain.training.trainer import Trainer, TrainState


@dataclass
class Samplers:
    """A run's seeded batch streams: fine steps, coarse (and control) steps, diagnostics. Each has its
    own seed, so fine step n of every run with the same seed trains on the same batch."""

    fine: Any
    coarse: Any
    diag: Any


@dataclass
class Hooks:
    """What the run asks of the runner: `should_stop()` is checked between steps (a signal, say);
    `after_step(kind)` is called after every optimizer step and its rows, at a point where
    `state_dict()` is a valid resume point (where checkpoints are taken)."""

    should_stop: Callable[[], bool]
    after_step: Callable[[StepKind], None]


class ViewsAhead:
    """The views a sub-path policy names for the steps of a phase, made for the next AHEAD steps at once:
    each is the view of `policy.path(step)`, drawn in one tight loop (one draw right after a step's work,
    its caches cold, costs several times more)."""

    AHEAD = 64

    def __init__(self, policy: PathPolicy, model: GPT):
        self.policy, self.model = policy, model
        self._start, self._views = 0, []

    def view(self, step: int) -> ModelView:
        i = step - self._start
        if not 0 <= i < len(self._views):
            self._start, i = step, 0
            self._views = [path_view(self.model, self.policy.path(s)) for s in range(step, step + self.AHEAD)]
        return self._views[i]


class PlanRunner:
    """Executes the plan of `cfg` with one Trainer. Owns the optimizers: the fine one, and one per
    coarse model."""

    def __init__(self, cfg: Any, trainer: Trainer, evaluator: Evaluator, hierarchy: Optional[Hierarchy],
                 fine_optimizer: torch.optim.Optimizer, samplers: Samplers, device: torch.device):
        self.cfg, self.trainer, self.evaluator, self.hierarchy = cfg, trainer, evaluator, hierarchy
        self.fine = hierarchy.fine if hierarchy else fine_view(trainer.model)
        self.fine_optimizer, self.samplers, self.device = fine_optimizer, samplers, device
        self.diagnostics = Diagnostics(trainer, samplers.diag)
        self.kind = run_kind(cfg)
        self.control = self.kind == RunKind.schedule_control
        self.plan = build_plan(cfg)
        self.last_fine_step = fine_steps(self.plan)  # train.max_steps x train.budget
        self.coarse_optim_cfg = resolve_coarse_optim(cfg.optim, cfg.multilevel.coarse_optim)
        # Schedules and intervals read from the config once: the step loop reads plain Python values.
        self.fine_schedule = LRSchedule.from_config(cfg.schedule, cfg.optim.lr, self.last_fine_step)
        self._coarse_schedules: dict[int, LRSchedule] = {}  # by phase length
        self.log_every, self.eval_every = int(cfg.train.log_interval), int(cfg.train.eval_interval)
        self.coarse_log_every = int(cfg.multilevel.coarse_log_interval)
        self.coarse_optimizers: dict[tuple[int, ...], torch.optim.Optimizer] = {}
        self.handlers: dict[PhaseKind, Callable[[Phase, Hooks], bool]] = {
            PhaseKind.train: self._train,
            PhaseKind.restrict: self._restrict,
            PhaseKind.diagnose: self._diagnose,
            PhaseKind.prolong: self._prolong,
            PhaseKind.evaluate: self._evaluate,
            PhaseKind.grow: self._grow,
        }

    # -- which model, optimizer and LR a phase uses -------------------------------------------------
    def view_for(self, phase: Phase) -> ModelView:
        if not phase.path or self.control:
            return self.fine
        return self.hierarchy.view(phase.path, phase.cycle or 0)

    def coarse_optimizer(self, phase: Phase, view: ModelView, phase_start: bool) -> torch.optim.Optimizer:
        """The optimizer of coarse model `phase.path`; with coarse_optimizer_state=reset its state is
        cleared at the start of every coarse phase (not when a phase resumes mid-way)."""
        opt = self.coarse_optimizers.get(phase.path)
        if opt is None:
            opt = self._new_coarse_optimizer(phase.path, view)
        elif phase_start and self.cfg.multilevel.coarse_optimizer_state == StatePolicy.reset:
            opt.state.clear()
        return opt

    def _new_coarse_optimizer(self, path: tuple[int, ...], view: ModelView) -> torch.optim.Optimizer:
        """One optimizer per coarse model (per path). It holds every fine parameter (plus the view's own
        storage for `average`): parameters outside the current view get no gradient and are skipped,
        so a `random` scheme that redraws its blocks every cycle keeps per-parameter state."""
        params = list(self.trainer.model.parameters())
        if view.owns_blocks:
            params += [p for b in view.blocks for p in b.parameters()]
        opt = build_optimizer(params, self.coarse_optim_cfg, self.device)
        self.coarse_optimizers[path] = opt
        return opt

    def coarse_storage(self) -> list[torch.nn.Module]:
        """The blocks coarse models own (the `average` scheme), created at start-up for every coarse
        model of the plan, so that a data-parallel wrapper built next covers them (see
        mltrain/training/distributed.py)."""
        if self.hierarchy is None or self.control:
            return []
        blocks: list[torch.nn.Module] = []
        for path in dict.fromkeys(p.path for p in self.plan if p.path):
            view = self.hierarchy.view(path)
            if view.owns_blocks:
                blocks += view.blocks
        return blocks

    def fine_lr(self) -> float:
        return self.fine_schedule(self.trainer.state.fine_steps)

    def coarse_lr(self, step_in_phase: int, phase_steps: int) -> float:
        schedule = self._coarse_schedules.get(phase_steps)
        if schedule is None:
            schedule = self._coarse_schedules[phase_steps] = LRSchedule.from_config(
                self.cfg.multilevel.coarse_schedule, self.coarse_optim_cfg.lr, phase_steps)
        return schedule(step_in_phase)

    # -- execution ----------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] = lambda: False,
            after_step: Callable[[StepKind], None] = lambda kind: None) -> bool:
        """Execute the plan from the current position. Returns False when `should_stop()` ended it
        early (e.g. on preemption): the position then says exactly where to resume, mid-phase or not.
        See Hooks for `after_step`."""
        hooks, state = Hooks(should_stop, after_step), self.trainer.state
        while state.phase_index < len(self.plan):
            if should_stop():
                return False
            phase = self.plan[state.phase_index]
            if not self.handlers[phase.kind](phase, hooks):
                return False
            state.phase_index += 1
            state.step_in_phase = 0
        return True

    def _train(self, phase: Phase, hooks: Hooks) -> bool:
        """The steps of a train phase from `state.step_in_phase` on; False when stopped inside it."""
        state, fine = self.trainer.state, not phase.path
        kind = StepKind.fine if fine else (StepKind.control if self.control else StepKind.coarse)
        view = self.view_for(phase)
        optimizer = self.fine_optimizer if fine else self.coarse_optimizer(phase, view, state.step_in_phase == 0)
        sampler = self.samplers.fine if fine else self.samplers.coarse
        extra = self._row_columns(phase)
        paths = phase.paths
        eval_view = view if paths is None else self.path_view(paths.eval_path())
        ahead = None if paths is None else ViewsAhead(paths, self.trainer.model)
        while state.step_in_phase < phase.steps:
            if ahead is not None:  # this step's sub-path of the fine model
                view = ahead.view(state.fine_steps)
            lr = self.fine_lr() if fine else self.coarse_lr(state.step_in_phase, phase.steps)
            self.trainer.train_step(view, optimizer, lr, sampler, kind)
            state.step_in_phase += 1
            self._rows_after_step(phase, kind, view, eval_view, lr, extra)
            hooks.after_step(kind)
            if state.step_in_phase < phase.steps and hooks.should_stop():
                return False
        return True

    def _row_columns(self, phase: Phase) -> dict:
        """The columns a phase adds to its train rows: its cycle, and in the schedule control the coarse
        model whose phase the fine steps stand in for."""
        extra: dict[str, Any] = {} if phase.cycle is None else {"cycle": phase.cycle}
        if self.control and phase.path:
            extra["control_for"] = coarse_name(phase.path)
        return extra

    def _rows_after_step(self, phase: Phase, kind: StepKind, view: ModelView, eval_view: ModelView, lr: float,
                         extra: dict) -> None:
        """Fine steps: a train row every train.log_interval steps (every step inside a cycle: the jumps
        after prolongation are the point), an evaluation every train.eval_interval steps, both at the
        last fine step (on `eval_view`: a sub-path method's whole model). Coarse and control steps: a train row every coarse_log_interval steps and at
        the end of the phase."""
        state = self.trainer.state
        if kind == StepKind.fine:
            n = state.fine_steps
            if n % self.log_every == 0 or n == self.last_fine_step or phase.cycle is not None:
                self.trainer.log_train(kind, view, lr, **extra)
            if n % self.eval_every == 0 or n == self.last_fine_step:
                self.evaluator.log_eval(eval_view)
        elif state.step_in_phase % self.coarse_log_every == 0 or state.step_in_phase == phase.steps:
            self.trainer.log_train(kind, view, lr, **extra)

    def path_view(self, sub: Optional[SubPath]) -> ModelView:
        """The view of the fine model a sub-path names (None: the fine model)."""
        return self.fine if sub is None else path_view(self.trainer.model, sub)

    def _grow(self, phase: Phase, hooks: Hooks) -> bool:
        copy_blocks(self.trainer.model, self.fine_optimizer, phase.growth)
        return True

    def _restrict(self, phase: Phase, hooks: Hooks) -> bool:
        if not self.control:
            self.hierarchy.restrict(self.view_for(phase))
        return True

    def _diagnose(self, phase: Phase, hooks: Hooks) -> bool:
        if not self.control and self.cfg.multilevel.diagnostics:
            self.diagnostics.log_diagnostics(self.view_for(phase), phase.cycle)
        return True

    def _prolong(self, phase: Phase, hooks: Hooks) -> bool:
        if not self.control:
            self.hierarchy.prolong(self.view_for(phase))
        if phase.level == 1 and self.cfg.multilevel.fine_momentum_after_prolong == StatePolicy.reset:
            self.fine_optimizer.state.clear()
        return True

    def _evaluate(self, phase: Phase, hooks: Hooks) -> bool:
        self.evaluator.log_eval(self.fine, cycle=phase.cycle)
        return True

    # -- resumable state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this runner is: weights, every optimizer, the
        `average` coarse storage, counters and plan position, sampler positions, clock, RNG states."""
        t, clock = self.trainer, self.trainer.clock.state_dict()
        return {
            "model": t.model.state_dict(),
            "fine_optimizer": self.fine_optimizer.state_dict(),
            "coarse_optimizers": {path_key(p): opt.state_dict() for p, opt in self.coarse_optimizers.items()},
            "coarse_storage": self.hierarchy.state_dict() if self.hierarchy else {},
            "train_state": t.state.state_dict(),
            "samplers": {"fine": self.samplers.fine.state_dict(), "coarse": self.samplers.coarse.state_dict()},
            "diag_index": self.diagnostics.index,
            "elapsed_s": clock["elapsed_s"],  # so time_s and train_time_s go on from where they stopped
            "apart_s": clock["apart_s"],
            "last_loss": dict(t.last_loss),
            "pending_rows": t.pending_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a runner built from the same config (same plan) to the saved position."""
        t = self.trainer
        t.model.load_state_dict(state["model"])
        self.fine_optimizer.load_state_dict(state["fine_optimizer"])
        if self.hierarchy:
            self.hierarchy.load_state_dict(state["coarse_storage"])
        for key, opt_state in state["coarse_optimizers"].items():
            path = key_path(key)
            view = self.hierarchy.view(path) if self.hierarchy and not self.control else self.fine
            self._new_coarse_optimizer(path, view).load_state_dict(opt_state)
        t.state = TrainState(**state["train_state"])
        self.samplers.fine.load_state_dict(state["samplers"]["fine"])
        self.samplers.coarse.load_state_dict(state["samplers"]["coarse"])
        self.diagnostics.index = state["diag_index"]
        t.clock.restart(elapsed=state["elapsed_s"], apart=state.get("apart_s", 0.0))
        t.last_loss = dict(state["last_loss"])
        t.load_pending_state(state.get("pending_rows", {}))
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
