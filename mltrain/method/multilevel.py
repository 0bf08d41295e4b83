"""The cycle and its recursion over levels, as a flat *plan* of phases; which optimizer and LR each
phase uses.

One cycle at level l (the paper's, for levels=2; at level 0 followed by a held-out evaluation when
multilevel.eval_every_cycle):
    train the level-l model (fine_steps_per_cycle fine steps at level 0, coarse_steps at levels ≥ 1);
    then, if a coarser level exists, for each coarse model c of it (multilevel.order):
        restrict c  →  diagnostics (coarse vs parent)  →  cycle(c, l+1)  →  prolong c into level l.
n_cycles of those run first; fine-only training then continues to train.max_steps. Single-level
training is the plan with one phase, so there is one loop for both.

The plan is a list fixed at start-up and executed with a position (phase index, step within the
phase) kept in TrainState: the resumable "schedule position".

The rival depth methods (depth_method=stacking|layer_drop|raptr, mltrain/method/rivals.py) are plans of
fine train phases too: a phase's `paths` policy names the sub-path of the fine model each of its steps
runs (drawn per step from the seed and the step number), and stacking adds `grow` phases between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from mltrain.method import rivals
from mltrain.method.coarsening import Hierarchy, ModelView, build_scheme, fine_view
from mltrain.method.paths import PathPolicy, Stage, SubPath
from mltrain.method.stacking import Growth
from mltrain.config import Control, Order, StatePolicy
from mltrain.training.flops import train_flops_per_token
from mltrain.training.optim import LRSchedule, build_optimizer, resolve_coarse_optim
from mltrain.training.trainer import Trainer, TrainState


@dataclass(frozen=True)
class Phase:
    kind: str  # train | restrict | diagnose | prolong | evaluate | grow
    path: tuple[int, ...] = ()  # which model: () fine, (a,) coarse model a, (a, b) its coarse model b…
    steps: int = 0
    cycle: Optional[int] = None
    paths: Optional[PathPolicy] = None  # train phases of the fine model: the sub-path each step runs (None: all)
    growth: Optional[Growth] = None  # grow phases: how the fine model's blocks are copied

    @property
    def level(self) -> int:
        return len(self.path)


def run_kind(cfg: Any) -> str:
    if (rival := rivals.rival_kind(cfg)) is not None:
        return rival.value
    if not build_scheme(cfg.coarsening).coarsens:
        return "single"
    return "schedule_control" if cfg.multilevel.control == Control.schedule else "multilevel"


def control_ratio(cfg: Any, level: int) -> float:
    """FLOPs of one level-`level` coarse step over one fine step (same batch size)."""
    m, scheme = cfg.model, build_scheme(cfg.coarsening)
    depth = m.n_layer
    for _ in range(level):
        depth = scheme.coarse_depth(depth)
    coarse = train_flops_per_token(depth, m.n_embd, m.vocab_size, m.block_size)
    fine = train_flops_per_token(m.n_layer, m.n_embd, m.vocab_size, m.block_size)
    return coarse / fine


def control_steps(cfg: Any, level: int) -> int:
    """Fine steps that cost the same FLOPs as one phase of `coarse_steps` level-`level` coarse steps
    (rounded; the plan spreads the rounding over the run, see ControlSteps)."""
    return max(1, round(cfg.multilevel.coarse_steps * control_ratio(cfg, level)))


class ControlSteps:
    """Fine-step counts for the schedule control's phases that match the coarse phases' FLOPs over the
    whole run: phase i of a level gets round(i · x) - round((i-1) · x) steps, x = coarse_steps × the
    coarse/fine cost ratio, so the total is within half a step of the coarse FLOPs it replaces instead
    of drifting by up to half a step per phase."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.done: dict[int, tuple[int, int]] = {}  # level -> (phases so far, steps so far)

    def next(self, level: int) -> int:
        phases, steps = self.done.get(level, (0, 0))
        target = round((phases + 1) * self.cfg.multilevel.coarse_steps * control_ratio(self.cfg, level))
        n = target - steps
        self.done[level] = (phases + 1, target)
        return n


def build_plan(cfg: Any) -> list[Phase]:
    ml, t = cfg.multilevel, cfg.train
    kind = run_kind(cfg)
    if kind == "single":
        return [Phase("train", (), t.max_steps)]
    if rivals.rival_kind(cfg) is not None:
        return stage_phases(rivals.stages(cfg, t.max_steps))
    children = list(range(build_scheme(cfg.coarsening).n_coarse_models))
    if ml.order == Order.descending:
        children.reverse()

    control = ControlSteps(cfg)

    def cycle(path: tuple[int, ...], c: int) -> list[Phase]:
        level = len(path)
        if level == 0:
            steps = ml.fine_steps_per_cycle
        else:
            steps = control.next(level) if kind == "schedule_control" else ml.coarse_steps
        phases = [Phase("train", path, steps, c)]
        if level + 1 < ml.levels:
            for child in children:
                sub = path + (child,)
                phases += [Phase("restrict", sub, cycle=c), Phase("diagnose", sub, cycle=c)]
                phases += cycle(sub, c)
                phases.append(Phase("prolong", sub, cycle=c))
        return phases

    plan = []
    for c in range(ml.n_cycles):
        plan += cycle((), c)
        if ml.eval_every_cycle:  # held-out loss right after the cycle's last prolongation
            plan.append(Phase("evaluate", (), cycle=c))
    rest = t.max_steps - ml.n_cycles * ml.fine_steps_per_cycle
    if rest > 0:
        plan.append(Phase("train", (), rest))
    return plan


def stage_phases(stages: list[Stage]) -> list[Phase]:
    """A rival method's stages as fine train phases, each after its growth (if any)."""
    plan = []
    for stage in stages:
        if stage.growth is not None:
            plan.append(Phase("grow", growth=stage.growth))
        plan.append(Phase("train", (), stage.steps, paths=stage.paths))
    return plan


def planned_steps(plan: list[Phase]) -> int:
    return sum(p.steps for p in plan)


class MultilevelRunner:
    """Executes a plan with one Trainer. Owns the optimizers: the fine one, and one per coarse model."""

    def __init__(self, cfg: Any, trainer: Trainer, hierarchy: Optional[Hierarchy], fine_optimizer,
                 sampler: Any, coarse_sampler: Any, diag_sampler: Any, device: torch.device):
        self.cfg, self.trainer, self.hierarchy = cfg, trainer, hierarchy
        self.fine = hierarchy.fine if hierarchy else fine_view(trainer.model)
        self.fine_optimizer, self.device = fine_optimizer, device
        self.sampler, self.coarse_sampler, self.diag_sampler = sampler, coarse_sampler, diag_sampler
        self.kind = run_kind(cfg)
        self.control = self.kind == "schedule_control"
        self.plan = build_plan(cfg)
        self.coarse_optim_cfg = resolve_coarse_optim(cfg.optim, cfg.multilevel.coarse_optim)
        # Schedules and intervals read from the config once: the step loop reads plain Python values.
        self.fine_schedule = LRSchedule.from_config(cfg.schedule, cfg.optim.lr, cfg.train.max_steps)
        self._coarse_schedules: dict[int, LRSchedule] = {}  # by phase length
        self.coarse_optimizers: dict[tuple[int, ...], torch.optim.Optimizer] = {}
        self.diag_index = 0

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
        """The blocks coarse models own (the `average` scheme), created now for every coarse model of
        the plan, so that a data-parallel wrapper built next covers them (see mltrain/training/distributed.py)."""
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
            after_step: Callable[[str], None] = lambda kind: None) -> bool:
        """Execute the plan from the current position. Returns False when `should_stop()` ended it
        early (e.g. on preemption): the position then says exactly where to resume, mid-phase or not.
        `after_step(kind)` is called after every optimizer step and its rows (kind: fine, coarse or
        control), at a point where `state_dict()` is a valid resume point (where checkpoints are taken)."""
        state = self.trainer.state
        while state.phase_index < len(self.plan):
            if should_stop():
                return False
            phase = self.plan[state.phase_index]
            if phase.kind == "train":
                if not self._train(phase, should_stop, after_step):
                    return False
            else:
                getattr(self, "_" + phase.kind)(phase)
            state.phase_index += 1
            state.step_in_phase = 0
        return True

    def _train(self, phase: Phase, should_stop: Callable[[], bool], after_step: Callable[[str], None]) -> bool:
        t, state, cfg = self.trainer, self.trainer.state, self.cfg
        view = self.view_for(phase)
        fine = not phase.path
        kind = "fine" if fine else ("control" if self.control else "coarse")
        optimizer = self.fine_optimizer if fine else self.coarse_optimizer(phase, view, state.step_in_phase == 0)
        sampler = self.sampler if fine else self.coarse_sampler
        extra = {} if phase.cycle is None else {"cycle": phase.cycle}
        if self.control and not fine:
            extra["control_for"] = ".".join(map(str, phase.path))
        # Plain values for the loop (an OmegaConf read per step costs more than it looks).
        log_every, eval_every, max_steps = cfg.train.log_interval, cfg.train.eval_interval, cfg.train.max_steps
        coarse_log_every, in_cycle = cfg.multilevel.coarse_log_interval, phase.cycle is not None
        paths = phase.paths
        eval_view = view if paths is None else self.path_view(paths.eval_path())
        while state.step_in_phase < phase.steps:
            if paths is not None:  # this step's sub-path of the fine model
                view = self.path_view(paths.path(state.fine_steps))
            lr = self.fine_lr() if fine else self.coarse_lr(state.step_in_phase, phase.steps)
            t.step(view, optimizer, lr, sampler, kind)
            state.step_in_phase += 1
            if fine:
                n = state.fine_steps
                # Every fine step of a cycle is logged: the jumps after prolongation are the point.
                if n % log_every == 0 or n == max_steps or in_cycle:
                    t.log_train(kind, view, lr, **extra)
                if n % eval_every == 0 or n == max_steps:
                    t.log_eval(eval_view)
            elif state.step_in_phase % coarse_log_every == 0 or state.step_in_phase == phase.steps:
                t.log_train(kind, view, lr, **extra)
            after_step(kind)
            if state.step_in_phase < phase.steps and should_stop():
                return False
        return True

    def path_view(self, sub: Optional[SubPath]) -> ModelView:
        """The view of the fine model a sub-path names (None: the fine model)."""
        return self.fine if sub is None else sub.view(self.trainer.model)

    def _grow(self, phase: Phase) -> None:
        phase.growth.apply(self.trainer.model, self.fine_optimizer)

    def _restrict(self, phase: Phase) -> None:
        if not self.control:
            self.hierarchy.restrict(self.view_for(phase))

    def _diagnose(self, phase: Phase) -> None:
        if self.control or not self.cfg.multilevel.diagnostics:
            return
        view = self.view_for(phase)
        batch = self.diag_sampler.batch(self.diag_index)
        self.diag_index += 1
        row = {"step": self.trainer.state.fine_steps, "level": view.level, "cycle": phase.cycle,
               "coarse_model": phase.path[-1], **self.trainer.gradient_agreement(view, view.parent, batch),
               **self.trainer.counters()}
        self.trainer.log(row)

    def _evaluate(self, phase: Phase) -> None:
        self.trainer.log_eval(self.fine, cycle=phase.cycle)

    def _prolong(self, phase: Phase) -> None:
        if not self.control:
            self.hierarchy.prolong(self.view_for(phase))
        if phase.level == 1 and self.cfg.multilevel.fine_momentum_after_prolong == StatePolicy.reset:
            self.fine_optimizer.state.clear()

    # -- resumable state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this runner is: weights, every optimizer, the
        `average` coarse storage, counters and plan position, sampler positions, RNG states."""
        return {
            "model": self.trainer.model.state_dict(),
            "fine_optimizer": self.fine_optimizer.state_dict(),
            "coarse_optimizers": {_key(p): opt.state_dict() for p, opt in self.coarse_optimizers.items()},
            "coarse_storage": self.hierarchy.state_dict() if self.hierarchy else {},
            "train_state": self.trainer.state.state_dict(),
            "samplers": {"fine": self.sampler.state_dict(), "coarse": self.coarse_sampler.state_dict()},
            "diag_index": self.diag_index,
            "elapsed_s": self.trainer.elapsed(),  # so time_s goes on from where it stopped
            "last_loss": dict(self.trainer.last_loss),
            "pending_rows": self.trainer.pending_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a runner built from the same config (same plan) to the saved position."""
        self.trainer.model.load_state_dict(state["model"])
        self.fine_optimizer.load_state_dict(state["fine_optimizer"])
        if self.hierarchy:
            self.hierarchy.load_state_dict(state["coarse_storage"])
        for key, opt_state in state["coarse_optimizers"].items():
            path = tuple(int(i) for i in key.split("."))
            view = self.hierarchy.view(path) if self.hierarchy and not self.control else self.fine
            self._new_coarse_optimizer(path, view).load_state_dict(opt_state)
        self.trainer.state = TrainState(**state["train_state"])
        self.sampler.load_state_dict(state["samplers"]["fine"])
        self.coarse_sampler.load_state_dict(state["samplers"]["coarse"])
        self.diag_index = state["diag_index"]
        self.trainer.t0 = time.perf_counter() - state["elapsed_s"]
        self.trainer.last_loss = dict(state["last_loss"])
        self.trainer.load_pending_state(state.get("pending_rows", {}))
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])


def _key(path: tuple[int, ...]) -> str:
    return ".".join(map(str, path))
