"""RaPTr, random path training (Panigrahi et al., ICML 2024): stages of random sub-paths whose length
grows from stage to stage and ends at the full model.

In stage s every step runs a path of p_s of the L blocks: the fixed blocks I (the first and the last,
`fix_first`/`fix_last`) and p_s − |I| others drawn uniformly without replacement, run in depth order.
With `rescale`, each drawn block's residual is scaled by 1 / (its chance of being drawn),
(L − |I|) / (p_s − |I|), so a path's expected residual sum is the full model's; the fixed blocks always
run and keep step 1. The last stage (p = L) is single-level training of the full model; held-out loss
is always measured on the full model, unscaled.

`raptr.path_lengths: null` follows the paper's schedules, half the depth to the full depth in four
equal increments (6-8-10-12 for BERT-base's 12 layers, 12-16-20-24 for UL2's 24), at any depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Protocol

import numpy as np

from mltrain.core.errors import ConfigError
from mltrain.method.paths import PathPolicy, Stage, SubPath, stage_lengths, step_uniforms
from mltrain.method.registry import register_method
from mltrain.method.rivals import Rival
from mltrain.method.settings import RunSettings

STREAM = 2  # keeps RaPTr's draws apart from other methods' (paths.step_uniforms)
STAGES = 4  # stages of the paper's schedules


@dataclass
class RaptrConfig:
    """The `raptr` section: stage s trains random paths of path_lengths[s] blocks."""

    path_lengths: Optional[List[int]] = None  # per stage, ending at n_layer; null: L/2 … L in 4 stages
    stage_fractions: Optional[List[float]] = None  # of train.max_steps, summing to 1; null: equal stages
    fix_first: bool = True  # the first block runs at every step
    fix_last: bool = True  # the last block runs at every step
    rescale: bool = True  # scale each drawn block's residual by 1/(its chance of being drawn)


class RaptrRun(RunSettings, Protocol):
    """The run's settings as a RaPTr run reads them: the shared sections and the raptr one."""

    @property
    def raptr(self) -> RaptrConfig: ...


@dataclass(frozen=True)
class RandomPaths(PathPolicy):
    n_layer: int
    length: int  # p: blocks each step runs
    fixed: tuple[int, ...]  # positions that run at every step
    rescale: bool
    seed: int

    def path(self, step: int) -> SubPath:
        return self.paths(step, 1)[0]

    def paths(self, start: int, count: int) -> list[SubPath]:
        """Each step draws the free blocks of its `drawn` smallest uniforms (paths.step_uniforms, one per
        free block): `drawn` of them uniformly without replacement."""
        free = np.array([i for i in range(self.n_layer) if i not in self.fixed], dtype=np.int64)
        drawn = self.length - len(self.fixed)
        order = np.argsort(step_uniforms(self.seed, STREAM, start, count, len(free)), axis=1, kind="stable")
        scale = len(free) / drawn if drawn else 1.0
        step_of = [1.0 if i in self.fixed else scale for i in range(self.n_layer)].__getitem__  # of each block
        out = []
        for chosen in free[order[:, :drawn]].tolist():
            blocks = tuple(sorted({*self.fixed, *chosen}))
            out.append(SubPath(blocks, tuple(map(step_of, blocks)) if self.rescale else None))
        return out


@register_method
class Raptr(Rival):
    """Stages of random sub-paths of growing length (RaPTr)."""

    name = "raptr"
    Config = RaptrConfig  # the `raptr` section
    cfg: RaptrRun

    def stages(self, total_steps: int) -> list[Stage]:
        n, c, fixed = self.cfg.model.n_layer, self.cfg.raptr, fixed_blocks(self.cfg)
        out = []
        for length, steps in zip(path_lengths(self.cfg), _stage_steps(self.cfg, total_steps)):
            paths: Optional[PathPolicy] = None  # a path of every block: the full model
            if length < n:
                paths = RandomPaths(n, length, fixed, bool(c.rescale), self.cfg.seed)
            out.append(Stage(steps, paths))
        return out

    def check_keys(self, total_steps: int) -> None:
        n, c = self.cfg.model.n_layer, self.cfg.raptr
        lengths, n_fixed = path_lengths(self.cfg), len(fixed_blocks(self.cfg))
        if not lengths:
            raise ConfigError("raptr.path_lengths=[] names no stage: give one path length per stage, "
                              "the last the full depth")
        if any(not 1 <= p <= n for p in lengths):
            raise ConfigError(f"raptr.path_lengths={lengths} must be between 1 and the depth (model.n_layer={n})")
        if lengths[-1] != n:
            raise ConfigError(f"raptr.path_lengths={lengths} must end at the full model ({n} blocks, model.n_layer)")
        if any(b < a for a, b in zip(lengths, lengths[1:])):
            raise ConfigError(f"raptr.path_lengths={lengths} must not decrease from stage to stage")
        if lengths[0] < n_fixed:
            raise ConfigError(f"raptr.path_lengths={lengths}: a path of {lengths[0]} blocks cannot hold the {n_fixed} "
                              "fixed blocks (raptr.fix_first, raptr.fix_last)")
        if c.stage_fractions is not None:
            f = list(c.stage_fractions)
            if len(f) != len(lengths):
                raise ConfigError(f"raptr.stage_fractions has {len(f)} entries for {len(lengths)} stages "
                                  "(raptr.path_lengths)")
            if any(not x > 0 for x in f) or abs(sum(f) - 1.0) > 1e-6:
                raise ConfigError(f"raptr.stage_fractions={f} must be positive and sum to 1")
        steps = _stage_steps(self.cfg, total_steps)
        if min(steps) < 1:
            raise ConfigError(f"raptr stages of {steps} steps do not fit in train.max_steps x train.budget = "
                              f"{total_steps} steps: every stage needs at least one")


def fixed_blocks(cfg: RaptrRun) -> tuple[int, ...]:
    n, c = cfg.model.n_layer, cfg.raptr
    return tuple(sorted({*([0] if c.fix_first else []), *([n - 1] if c.fix_last else [])}))


def path_lengths(cfg: RaptrRun) -> list[int]:
    """raptr.path_lengths, or the paper's rule: L/2 … L in four equal increments (at least |I|)."""
    if cfg.raptr.path_lengths is not None:
        return list(cfg.raptr.path_lengths)
    n, floor = cfg.model.n_layer, len(fixed_blocks(cfg))
    return [max(floor, int(round(x))) for x in np.linspace(n / 2, n, STAGES)]


def _stage_steps(cfg: RaptrRun, total_steps: int) -> list[int]:
    n_stages = len(path_lengths(cfg))
    fractions = cfg.raptr.stage_fractions or [1.0 / n_stages] * n_stages
    return stage_lengths(np.cumsum(fractions)[:-1].tolist(), total_steps)

