"""Sub-paths: which of the fine model's own blocks one training step runs, chosen per step.

The rival depth methods (stacking, layer dropping, RaPTr: mltrain/method/rivals.py) train the fine
model's blocks through a different sub-model at each step. A `PathPolicy` says which: `path(step)` gives
the positions of the blocks to run, in depth order, and optionally each one's Euler step (x + h·F(x):
a block that stands for the ones skipped around it takes a longer step). The plan gives a train phase a
policy; the runner asks it at every step and trains the view it names (mltrain/model/views.py path_view) with
the one step function.

A random policy's draws at a step are a pure function of (run seed, stream, step) alone, never of a
global RNG state, so every rank of a data-parallel job draws the same blocks at the same step, and a
resumed run draws what the uninterrupted run would have. The steps are drawn in blocks (`step_uniforms`:
one generator per DRAW_BLOCK steps, not one per step, whose set-up costs more than the draw), and the
runner asks for the paths of the steps ahead in one call (`PathPolicy.paths`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class SubPath:
    """The blocks one step runs (positions in the fine model, in depth order) and their Euler steps
    (None: 1 for every block)."""

    blocks: tuple[int, ...]
    scales: Optional[tuple[float, ...]] = None


class PathPolicy:
    """Which sub-path each training step of a phase runs: a function of the step number (and the run's
    seed) only. Subclasses are frozen dataclasses, so a plan that holds them compares and prints by value
    (a checkpoint names them to refuse another plan)."""

    def path(self, step: int) -> SubPath:
        """The sub-path fine step `step` (0-based, counted over the whole run) trains."""
        raise NotImplementedError

    def paths(self, start: int, count: int) -> list[SubPath]:
        """`path(s)` for s in start … start + count − 1, each exactly that: the runner's call for the steps
        ahead (a random policy draws them together, for the cost of about one draw)."""
        return [self.path(s) for s in range(start, start + count)]

    def eval_path(self) -> Optional[SubPath]:
        """The model the phase's held-out loss is measured on; None: the whole fine model."""
        return None


DRAW_BLOCK = 64  # steps whose uniforms come from one generator


def step_uniforms(seed: int, stream: int, start: int, count: int, width: int) -> np.ndarray:
    """`width` uniforms in [0, 1) per step for the steps start … start + count − 1, one row each: row
    `s - start` is a pure function of (seed, stream, s, width), whatever `start` and `count`. Step s's
    row is row s mod DRAW_BLOCK of its block's draw, one generator seeded by numpy's SeedSequence of
    (seed, stream, s // DRAW_BLOCK). `stream` keeps the draws of different methods apart."""
    first, last = start // DRAW_BLOCK, (start + count - 1) // DRAW_BLOCK
    rows = _block_uniforms(seed, stream, first, width)
    if last > first:
        rows = np.concatenate([rows, *(_block_uniforms(seed, stream, b, width) for b in range(first + 1, last + 1))])
    offset = start - first * DRAW_BLOCK
    return rows[offset:offset + count]


@functools.lru_cache(maxsize=16)
def _block_uniforms(seed: int, stream: int, block: int, width: int) -> np.ndarray:
    """The uniforms of one block of DRAW_BLOCK steps (read-only: cached, so that asking step by step
    draws each block once)."""
    rows = np.random.default_rng([seed, stream, block]).random((DRAW_BLOCK, width))
    rows.flags.writeable = False
    return rows


class BlockCopies:
    """A change of the fine model's blocks made between two steps (a stacking growth): block j becomes a
    copy of block `sources()[j]` as it was before the change (the same modules, new weights). With
    `copies_state` each copy's optimizer state is a copy of its source's; otherwise the whole optimizer
    state is cleared. A description: mltrain/training/growth.py carries it out. Subclasses are frozen
    dataclasses, like policies."""

    def sources(self) -> list[int]:
        raise NotImplementedError

    @property
    def copies_state(self) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Stage:
    """A stretch of a rival method's run: `steps` fine steps through `paths` (None: every block, as in
    single-level training), after `growth`, a change of the fine weights made before its first step."""

    steps: int
    paths: Optional[PathPolicy] = None
    growth: Optional[BlockCopies] = None


def stage_lengths(ends: Sequence[float], total: int) -> list[int]:
    """Steps of each stage of a `total`-step run whose stages end at the fractions `ends` of it (the last
    stage ends at the run's end): len(ends) + 1 counts that add up to `total`."""
    bounds = [0, *(round(f * total) for f in ends), total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def increasing_fractions(values: Sequence[Any]) -> bool:
    """Whether `values` are strictly increasing numbers inside (0, 1) (stage boundaries)."""
    return all(0.0 < v < 1.0 for v in values) and all(a < b for a, b in zip(values, values[1:]))


def describe(rule: Any) -> str:
    """A policy or growth as `Name(key=value, ...)` with plain values (what a checkpoint records of a plan)."""
    return f"{type(rule).__name__}({', '.join(f'{f.name}={getattr(rule, f.name)}' for f in fields(rule))})"
