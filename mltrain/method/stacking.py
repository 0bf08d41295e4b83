"""Progressive stacking (Gong et al., ICML 2019; Du et al., NeurIPS 2024, "Stacking Your
Transformers", G_stack): train a shallow model made of the first L / g^k blocks, grow it by copying its
blocks, and go on training the deeper one; k growths end at the full depth L.

A growth from n to g·n blocks sets block j of the deeper model to a copy of block
    j mod n          operator `stack`: the whole stack on top of itself (Gong et al., Du et al.'s G_stack)
    ⌊j / g⌋          operator `interleave`: each block next to its copies
(the copies are the fine model's own blocks n … g·n−1 overwritten in place: same modules, new weights).
Embeddings, final norm and head are shared and carry on. One optimizer and one LR schedule run over the
whole run: the schedule goes on across a growth, as in Gong et al.'s released scripts (each stage
resumes the decay where the last ended). At a growth the optimizer state is `reset` (Gong et al.'s
scripts start each stage's optimizer afresh) or `copy` (each copy gets a copy of its source's state).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Protocol

from mltrain.core.choice import Choice
from mltrain.core.errors import ConfigError
from mltrain.method.paths import BlockCopies, PathPolicy, Stage, SubPath, increasing_fractions, stage_lengths
from mltrain.method.registry import register_method
from mltrain.method.rivals import Rival
from mltrain.method.settings import RunSettings


class GrowthOperator(Choice):
    stack = "stack"  # block j ← block j mod n: the stack on top of itself
    interleave = "interleave"  # block j ← block ⌊j/g⌋: each block next to its copies


class GrowthState(Choice):
    reset = "reset"  # the whole optimizer state is cleared at a growth
    copy = "copy"  # each copied block's parameters get a copy of their source's state


@dataclass
class StackingConfig:
    """The `stacking` section: the shallow model has n_layer / factor^k blocks for k = len(grow_at) growths."""

    operator: GrowthOperator = GrowthOperator.stack
    factor: int = 2  # g: the depth multiplies by g at each growth
    grow_at: List[float] = field(default_factory=lambda: [0.3])  # growth points, fractions of train.max_steps
    optimizer_state: GrowthState = GrowthState.reset  # at each growth


class StackingRun(RunSettings, Protocol):
    """The run's settings as a stacking run reads them: the shared sections and the stacking one."""

    @property
    def stacking(self) -> StackingConfig: ...


@dataclass(frozen=True)
class Prefix(PathPolicy):
    """The first `depth` blocks, every step: the shallow model of a stacking stage."""

    depth: int

    def path(self, step: int) -> SubPath:
        return SubPath(tuple(range(self.depth)))

    def eval_path(self) -> Optional[SubPath]:
        return self.path(0)  # the model being trained is the shallow one


@dataclass(frozen=True)
class Growth(BlockCopies):
    """Grow the first `depth` blocks to depth × factor blocks by copying them (mltrain/training/growth.py
    copies the weights and carries the optimizer state)."""

    operator: GrowthOperator
    depth: int
    factor: int
    optimizer_state: GrowthState

    def sources(self) -> list[int]:
        """For each block of the grown model, the block (of the shallow one) it is a copy of."""
        n, g = self.depth, self.factor
        if self.operator == GrowthOperator.stack:
            return [j % n for j in range(n * g)]
        return [j // g for j in range(n * g)]

    @property
    def copies_state(self) -> bool:
        return self.optimizer_state == GrowthState.copy


@register_method
class Stacking(Rival):
    """A shallow model grown by copying its blocks (progressive stacking)."""

    name = "stacking"
    Config = StackingConfig  # the `stacking` section
    cfg: StackingRun

    def stages(self, total_steps: int) -> list[Stage]:
        """One stage per depth: the shallow model up to the first growth, …, the full model to the end."""
        c, n_layer = self.cfg.stacking, self.cfg.model.n_layer
        depth = n_layer // c.factor ** len(c.grow_at)
        out = []
        for s, steps in enumerate(stage_lengths(list(c.grow_at), total_steps)):
            growth = None
            if s > 0:
                growth = Growth(GrowthOperator(c.operator), depth, c.factor, GrowthState(c.optimizer_state))
                depth *= c.factor
            out.append(Stage(steps, Prefix(depth) if depth < n_layer else None, growth))
        return out

    def check_keys(self, total_steps: int) -> None:
        c, n_layer = self.cfg.stacking, self.cfg.model.n_layer
        grow_at = list(c.grow_at)
        if c.factor < 2:
            raise ConfigError(f"stacking.factor={c.factor} must be >= 2 (the depth multiplies by it at each growth)")
        if not grow_at:
            raise ConfigError("stacking.grow_at=[] has no growth: give the fractions of train.max_steps where the "
                              "model grows")
        if not increasing_fractions(grow_at):
            raise ConfigError(f"stacking.grow_at={grow_at} must be increasing fractions of train.max_steps in (0, 1)")
        growth = c.factor ** len(grow_at)
        if n_layer % growth:
            raise ConfigError(f"model.n_layer={n_layer} is not divisible by stacking.factor^len(stacking.grow_at)="
                              f"{c.factor}^{len(grow_at)}={growth}: the growths must start from a whole number "
                              "of blocks")
        steps = stage_lengths(grow_at, total_steps)
        if min(steps) < 1:
            raise ConfigError(f"stacking.grow_at={grow_at} gives stages of {steps} steps in train.max_steps x "
                              f"train.budget = {total_steps} steps: every stage needs at least one")
