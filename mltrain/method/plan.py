"""The plan: a run as a flat list of phases, fixed at start-up; the run kind.

One cycle at level l (the paper's, for levels=2; at level 0 followed by a held-out evaluation when
multilevel.eval_every_cycle):
    train the level-l model (fine_steps_per_cycle fine steps at level 0, coarse_steps at levels ≥ 1);
    then, if a coarser level exists, for each coarse model c of it (multilevel.order):
        restrict c  →  diagnostics (coarse vs parent)  →  cycle(c, l+1)  →  prolong c into level l.
n_cycles of those run first; fine-only training then continues to the run's fine steps
(train.max_steps × train.budget, `budget_steps`). Single-level training is the plan with one phase, so
there is one loop for both (training/runner.py executes a plan).

The plan is executed with a position (phase index, step within the phase) kept in TrainState: the
resumable "schedule position".

The rival depth methods (depth_method=stacking|layer_drop|raptr, mltrain/method/rivals.py) are plans of
fine train phases too: a phase's `paths` policy names the sub-path of the fine model each of its steps
runs (drawn per step from the seed and the step number), and stacking adds `grow` phases between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mltrain.config import Control, Order, budget_steps
from mltrain.method import rivals
from mltrain.method.coarsening import build_scheme
from mltrain.method.kinds import PhaseKind, RunKind
from mltrain.method.paths import BlockCopies, PathPolicy, Stage
from mltrain.flops import train_flops_per_token


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


def run_kind(cfg: Any) -> RunKind:
    """What a run trains, from its config: the one rule (summary.json and run.json record it)."""
    if (rival := rivals.rival_kind(cfg)) is not None:
        return rival
    if not build_scheme(cfg.coarsening).coarsens:
        return RunKind.single
    return RunKind.schedule_control if cfg.multilevel.control == Control.schedule else RunKind.multilevel


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
    """The phases of a run: its cycles, then fine training to `budget_steps(cfg.train)` fine steps."""
    ml = cfg.multilevel
    kind, total = run_kind(cfg), budget_steps(cfg.train)
    if kind == RunKind.single:
        return [Phase(PhaseKind.train, (), total)]
    if rivals.rival_kind(cfg) is not None:
        return stage_phases(rivals.stages(cfg, total))
    control = ControlSteps(cfg)
    plan = []
    for c in range(ml.n_cycles):
        plan += _cycle(cfg, kind, control, (), c)
        if ml.eval_every_cycle:  # held-out loss right after the cycle's last prolongation
            plan.append(Phase(PhaseKind.evaluate, (), cycle=c))
    rest = total - ml.n_cycles * ml.fine_steps_per_cycle
    if rest > 0:
        plan.append(Phase(PhaseKind.train, (), rest))
    return plan


def stage_phases(stages: list[Stage]) -> list[Phase]:
    """A rival method's stages as fine train phases, each after its growth (if any)."""
    plan = []
    for stage in stages:
        if stage.growth is not None:
            plan.append(Phase(PhaseKind.grow, growth=stage.growth))
        plan.append(Phase(PhaseKind.train, (), stage.steps, paths=stage.paths))
    return plan


def _cycle(cfg: Any, kind: RunKind, control: ControlSteps, path: tuple[int, ...], c: int) -> list[Phase]:
    """Cycle `c` at the level of `path`: train that model, then restrict, recurse into and prolong each
    of its coarse models."""
    ml, level = cfg.multilevel, len(path)
    if level == 0:
        steps = ml.fine_steps_per_cycle
    else:
        steps = control.next(level) if kind == RunKind.schedule_control else ml.coarse_steps
    phases = [Phase(PhaseKind.train, path, steps, c)]
    if level + 1 < ml.levels:
        for child in _children(cfg):
            sub = path + (child,)
            phases += [Phase(PhaseKind.restrict, sub, cycle=c), Phase(PhaseKind.diagnose, sub, cycle=c)]
            phases += _cycle(cfg, kind, control, sub, c)
            phases.append(Phase(PhaseKind.prolong, sub, cycle=c))
    return phases


def _children(cfg: Any) -> list[int]:
    """The coarse models of one level, in the order multilevel.order trains them."""
    children = list(range(build_scheme(cfg.coarsening).n_coarse_models))
    return children[::-1] if cfg.multilevel.order == Order.descending else children


def planned_steps(plan: list[Phase]) -> int:
    """Optimizer steps of every level the plan takes."""
    return sum(p.steps for p in plan)


def fine_steps(plan: list[Phase]) -> int:
    """Fine steps the plan takes: where the fine LR schedule ends and the last evaluation is."""
    return sum(p.steps for p in plan if p.kind == PhaseKind.train and not p.path)
