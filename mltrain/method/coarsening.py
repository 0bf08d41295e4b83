"""Coarsening schemes: which fine blocks each coarse model stands for, restriction and prolongation.
Nothing here knows about optimizers, data or schedules, and nothing here imports torch: the views that
run a coarse model and the hierarchy that moves weights between levels are mltrain/model/views.py.

A coarse model is a list of *groups* of positions in its parent (the fine model, or a coarser model at
deeper levels). Coarse block i stands for group i:

- Subset schemes (`stride`, which is the paper's `evenodd` for k=2, and `random`): coarse block i IS the
  parent block at group[i][0] — the same module, so training the coarse model updates the fine weights
  in place. The rest of the group are the parent blocks that follow it up to the next selected block;
  prolongation mixes them, θ ← (1-δ)·θ + δ·θ_coarse (the paper's Eq. 4). Blocks before the first
  selected one belong to no group and are untouched.
- `average` (Zou et al. 2024): coarse block i has its own storage; restriction sets it to the mean of
  its group of adjacent parent blocks, prolongation interpolates every block of the group towards it,
  θ ← (1-α)·θ + α·θ_coarse, with α = multilevel.delta.

Every scheme is one `Scheme` subclass registered with `@register_scheme`; the rest of mltrain (the
hierarchy below, the plan, validation) only asks the scheme object, never compares scheme names. A new
scheme is a class with a `name` and a `partition` (plus `restrict`/`prolong` if it owns its blocks):

    @register_scheme
    class Reversed(Scheme):
        name = "reversed"
        def partition(self, n_parent, seed):
            ...

and is then chosen with `coarsening.scheme=reversed`. The `coarsening` section that chooses a scheme and
sets its keys (`CoarseningConfig`) is defined here too.

A scheme's restriction and prolongation act on blocks (torch modules) handed to them; the hierarchy
(mltrain/model/views.py) calls them under torch.no_grad().
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence

import numpy as np

from mltrain.core.choice import Choice
from mltrain.core.errors import CoarseningError

if TYPE_CHECKING:
    import torch.nn as nn

Groups = list[tuple[int, ...]]  # one coarse model: for each of its blocks, the parent positions it stands for


class StepScale(Choice):
    unit = "unit"  # every block is an Euler step of size 1, at every level (the paper's coarse models)
    stride = "stride"  # a coarse block replacing k parent blocks takes a step of size k (the ODE reading)


@dataclass
class CoarseningConfig:
    """The `coarsening` section: which scheme coarsens the depth, and its keys (conf/coarsening/*.yaml)."""

    name: str = "none"  # the preset's name, used in run names and reports
    # A registered scheme (none, stride, random, average, or one you register). The registry is open, so
    # the name is checked against it at start-up rather than by its type.
    scheme: str = "none"
    k: int = 2  # stride/random: number of coarse models; average: blocks merged into one
    redraw: bool = False  # random: draw a new permutation every cycle
    seed: Optional[int] = None  # random: permutation seed (null: the run's seed)
    # unit: every coarse block is an Euler step of size 1 (the paper's coarse models); stride: of size k,
    # so a coarse model with k times fewer blocks covers the same depth (the ODE reading).
    step_scale: StepScale = StepScale.unit


# ---------------------------------------------------------------------------------------------
# The registry


class Scheme:
    """A coarsening scheme: everything the rest of mltrain asks about one.

    Built from the `coarsening` config (`k`, `redraw`, `seed`, `step_scale`). Class attributes say what
    the scheme is; `partition` says which parent positions each coarse model's blocks stand for. The
    default restriction/prolongation are a subset scheme's: coarse blocks are the parent's own modules.
    """

    name: ClassVar[str]
    coarsens: ClassVar[bool] = True  # False only for single-level training
    owns_blocks: ClassVar[bool] = False  # coarse blocks have their own storage (restricted, then prolonged)
    random: ClassVar[bool] = False  # partition depends on its seed (coarsening.seed, coarsening.redraw apply)
    # Whether coarse blocks are evenly spaced in depth, so that one Euler step of size k stands for the
    # k parent blocks each replaces (coarsening.step_scale=stride).
    uniform_steps: ClassVar[bool] = True

    def __init__(self, k: int = 2, redraw: bool = False, step_scale: StepScale | str = StepScale.unit):
        self.k = k
        self.redraw = redraw and self.random  # only a random partition can change between cycles
        self.step_scale = StepScale(step_scale)

    @classmethod
    def from_config(cls, c: CoarseningConfig) -> "Scheme":
        return cls(k=c.k, redraw=c.redraw, step_scale=c.step_scale)

    # -- what the plan and validation ask ---------------------------------------------------------------
    @property
    def n_coarse_models(self) -> int:
        """Coarse models per parent: the plan trains each of them in every cycle."""
        return self.k

    def coarse_depth(self, n_parent: int) -> int:
        """Blocks of each coarse model of a parent with n_parent blocks (FLOP accounting)."""
        return n_parent // self.k

    def step_factor(self) -> float:
        """How much longer a coarse block's Euler step is than its parent's."""
        return float(self.k) if self.step_scale == StepScale.stride else 1.0

    @classmethod
    def check_config(cls, c: CoarseningConfig, n_layer: int, levels: int) -> None:
        """CoarseningError with one clear line unless this scheme can coarsen `levels` levels of an
        n_layer-block model with config `c`."""
        if c.k < 2:
            raise CoarseningError(f"coarsening.k={c.k} must be >= 2 (scheme {cls.name})")
        if not cls.random and (c.redraw or c.seed is not None):
            raise CoarseningError(
                f"coarsening.redraw and coarsening.seed apply to random schemes only (scheme is {cls.name})"
            )
        if StepScale(c.step_scale) == StepScale.stride and not cls.uniform_steps:
            raise CoarseningError(
                f"coarsening.step_scale=stride needs evenly spaced coarse blocks; the {cls.name} scheme's are "
                f"not, so no single step size stands for them (use coarsening.step_scale=unit)"
            )
        n = n_layer
        for level in range(1, levels):
            if n % c.k:
                what = (
                    f"model.n_layer={n_layer} is not divisible by coarsening.k={c.k}"
                    if level == 1
                    else f"multilevel.levels={levels} is more than the depth allows: level {level} would "
                    f"split {n} blocks by k={c.k} (n_layer={n_layer} must be divisible by "
                    f"k^(levels-1)={c.k ** (levels - 1)})"
                )
                raise CoarseningError(f"{what} (coarsening.scheme={cls.name})")
            n //= c.k

    # -- the coarse models ------------------------------------------------------------------------------
    def partition(self, n_parent: int, seed: Sequence[int]) -> list[Groups]:
        """One list of groups per coarse model. `seed` (ints for numpy's SeedSequence) is used by
        random schemes only."""
        raise NotImplementedError

    def coarse_blocks(self, parent_blocks: Sequence[nn.Module], groups: Groups) -> list[nn.Module]:
        """The coarse model's blocks: a subset scheme runs the parent's own modules (no copies)."""
        return [parent_blocks[g[0]] for g in groups]

    def restrict(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups) -> None:
        """Initialise the coarse weights from the parent: nothing to do when they are the parent's."""

    def prolong(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups, delta: float) -> None:
        """Carry trained coarse weights into the parent: a selected block already holds them; the
        blocks after it in its group are mixed, θ ← (1-δ)·θ + δ·θ_coarse."""
        for coarse_block, group in zip(coarse, groups):
            for j in group[1:]:
                _mix(parent[j], coarse_block, delta)


_SCHEMES: dict[str, type[Scheme]] = {}


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make `cls` available as `coarsening.scheme=<cls.name>`."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a `name` to be registered as a coarsening scheme")
    _SCHEMES[cls.name] = cls
    return cls


def scheme_names() -> list[str]:
    return sorted(_SCHEMES)


def scheme_class(name: str) -> type[Scheme]:
    try:
        return _SCHEMES[name]
    except KeyError:
        raise CoarseningError(
            f"coarsening.scheme={name!r} is not one of {', '.join(scheme_names())} (the registered schemes)"
        ) from None


def build_scheme(c: CoarseningConfig) -> Scheme:
    """The scheme the `coarsening` config names."""
    return scheme_class(c.scheme).from_config(c)


def _mix(target: nn.Module, source: nn.Module, delta: float) -> None:
    """θ_target ← (1-δ)·θ_target + δ·θ_source, parameter by parameter (same module structure)."""
    for name, p in target.named_parameters():
        p.mul_(1.0 - delta).add_(source.get_parameter(name), alpha=delta)


def _stacked(tensors: Sequence[Any]) -> Any:
    """torch.stack(tensors) with the tensors' own methods (this module does not import torch)."""
    out = tensors[0].new_empty((len(tensors), *tensors[0].shape))
    for i, t in enumerate(tensors):
        out[i] = t
    return out


def _groups_from_selection(selected: Sequence[int], n_parent: int) -> Groups:
    """Each selected position with the non-selected positions after it, up to the next selected one."""
    selected = sorted(selected)
    bounds = list(selected[1:]) + [n_parent]
    return [tuple(range(s, e)) for s, e in zip(selected, bounds)]


# ---------------------------------------------------------------------------------------------
# The schemes


@register_scheme
class NoCoarsening(Scheme):
    """Single-level training: no coarse models."""

    name = "none"
    coarsens = False

    @property
    def n_coarse_models(self) -> int:
        return 0

    @classmethod
    def check_config(cls, c: CoarseningConfig, n_layer: int, levels: int) -> None:
        if StepScale(c.step_scale) != StepScale.unit:
            raise CoarseningError("coarsening.step_scale applies to coarse models; coarsening=none has none")

    def partition(self, n_parent: int, seed: Sequence[int]) -> list[Groups]:
        return []


@register_scheme
class Stride(Scheme):
    """k coarse models; model r keeps blocks r, r+k, r+2k, … (k=2: the paper's even/odd models A and B)."""

    name = "stride"

    def partition(self, n_parent: int, seed: Sequence[int]) -> list[Groups]:
        return [_groups_from_selection(range(r, n_parent, self.k), n_parent) for r in range(self.k)]


@register_scheme
class RandomPermutation(Scheme):
    """The control for the ODE reading: a seeded random permutation of the blocks cut into k equal
    parts, each run in depth order. Its blocks are unevenly spaced, so step_scale=stride is refused."""

    name = "random"
    random = True
    uniform_steps = False

    def partition(self, n_parent: int, seed: Sequence[int]) -> list[Groups]:
        perm = np.random.default_rng(list(seed)).permutation(n_parent)
        size = n_parent // self.k
        return [_groups_from_selection(perm[i * size : (i + 1) * size].tolist(), n_parent) for i in range(self.k)]


@register_scheme
class Average(Scheme):
    """Zou et al. 2024: one coarse model whose block i is the mean of k adjacent parent blocks (its own
    storage); prolongation interpolates every block of the group towards it with α = multilevel.delta."""

    name = "average"
    owns_blocks = True

    @property
    def n_coarse_models(self) -> int:
        return 1

    def partition(self, n_parent: int, seed: Sequence[int]) -> list[Groups]:
        return [[tuple(range(i, i + self.k)) for i in range(0, n_parent, self.k)]]

    def coarse_blocks(self, parent_blocks: Sequence[nn.Module], groups: Groups) -> list[nn.Module]:
        return [copy.deepcopy(parent_blocks[0]) for _ in groups]

    def restrict(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups) -> None:
        for coarse_block, group in zip(coarse, groups):
            for name, p in coarse_block.named_parameters():
                p.copy_(_stacked([parent[j].get_parameter(name) for j in group]).mean(dim=0))

    def prolong(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups, delta: float) -> None:
        for coarse_block, group in zip(coarse, groups):
            for j in group:
                _mix(parent[j], coarse_block, delta)
