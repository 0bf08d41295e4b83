"""Sub-paths: which of the fine model's own blocks one training step runs, chosen per step.

The rival depth methods (stacking, layer dropping, RaPTr: mltrain/method/rivals.py) train the fine
model's blocks through a different sub-model at each step. A `PathPolicy` says which: `path(step)` gives
the positions of the blocks to run, in depth order, and optionally each one's Euler step (x + h·F(x):
a block that stands for the ones skipped around it takes a longer step). The plan gives a train phase a
policy; the runner asks it at every step and trains the view it names with the one step function.

A random policy draws from a generator seeded by (run seed, stream, step) alone, never from a global
RNG state, so every rank of a data-parallel job draws the same blocks at the same step, and a resumed
run draws what the uninterrupted run would have.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from mltrain.method.coarsening import ModelView
from mltrain.model import GPT

if TYPE_CHECKING:
    from mltrain.method.stacking import Growth


@dataclass(frozen=True)
class SubPath:
    """The blocks one step runs (positions in the fine model, in depth order) and their Euler steps
    (None: 1 for every block)."""

    blocks: tuple[int, ...]
    scales: Optional[tuple[float, ...]] = None

    def view(self, model: GPT) -> ModelView:
        """A view running these blocks of `model` between its embeddings and head (no copies)."""
        return ModelView(model, [model.blocks[i] for i in self.blocks], step_size=self.scales or 1.0)


class PathPolicy:
    """Which sub-path each training step of a phase runs: a function of the step number (and the run's
    seed) only. Subclasses are frozen dataclasses, so a plan that holds them compares and prints by value
    (a checkpoint names them to refuse another plan)."""

    def path(self, step: int) -> SubPath:
        """The sub-path fine step `step` (0-based, counted over the whole run) trains."""
        raise NotImplementedError

    def eval_path(self) -> Optional[SubPath]:
        """The model the phase's held-out loss is measured on; None: the whole fine model."""
        return None


class ViewsAhead:
    """The views a sub-path policy names for the steps of a phase, made for the next AHEAD steps at once:
    each is `policy.path(step).view(model)`, drawn in one tight loop (one draw right after a step's
    work, its caches cold, costs several times more)."""

    AHEAD = 64

    def __init__(self, policy: PathPolicy, model: GPT):
        self.policy, self.model = policy, model
        self._start, self._views = 0, []

    def view(self, step: int) -> ModelView:
        i = step - self._start
        if not 0 <= i < len(self._views):
            self._start, i = step, 0
            self._views = [self.policy.path(s).view(self.model) for s in range(step, step + self.AHEAD)]
        return self._views[i]


def step_rng(seed: int, stream: int, step: int) -> np.random.Generator:
    """The generator of one step's draw: numpy's SeedSequence of (seed, stream, step). `stream` keeps
    the draws of different methods apart."""
    return np.random.default_rng([seed, stream, step])


@dataclass(frozen=True)
class Stage:
    """A stretch of a rival method's run: `steps` fine steps through `paths` (None: every block, as in
    single-level training), after `growth`, a change of the fine weights made before its first step."""

    steps: int
    paths: Optional[PathPolicy] = None
    growth: Optional["Growth"] = None


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
