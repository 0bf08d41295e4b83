"""Coarsening schemes: which fine blocks each coarse model stands for, the coarse *view*, restriction
and prolongation. Nothing here knows about optimizers, data or schedules.

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

and is then chosen with `coarsening.scheme=reversed`.

Views share the fine model's embedding, final norm and head (no copies), and a view of a view recurses
for more than two levels (12 → 6 → 3 blocks).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from mltrain.choice import Choice
from mltrain.errors import CoarseningError
from mltrain.method.kinds import model_name
from mltrain.model import GPT

Groups = list[tuple[int, ...]]  # one coarse model: for each of its blocks, the parent positions it stands for


class StepScale(Choice):
    unit = "unit"  # every block is an Euler step of size 1, at every level (the paper's coarse models)
    stride = "stride"  # a coarse block replacing k parent blocks takes a step of size k (the ODE reading)


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
    def from_config(cls, c: Any) -> "Scheme":
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
    def check_config(cls, c: Any, n_layer: int, levels: int) -> None:
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

    @torch.no_grad()
    def restrict(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups) -> None:
        """Initialise the coarse weights from the parent: nothing to do when they are the parent's."""

    @torch.no_grad()
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


def build_scheme(c: Any) -> Scheme:
    """The scheme the `coarsening` config names."""
    return scheme_class(c.scheme).from_config(c)


def _mix(target: nn.Module, source: nn.Module, delta: float) -> None:
    """θ_target ← (1-δ)·θ_target + δ·θ_source, parameter by parameter (same module structure)."""
    for name, p in target.named_parameters():
        p.mul_(1.0 - delta).add_(source.get_parameter(name), alpha=delta)


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
    def check_config(cls, c: Any, n_layer: int, levels: int) -> None:
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

    @torch.no_grad()
    def restrict(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups) -> None:
        for coarse_block, group in zip(coarse, groups):
            for name, p in coarse_block.named_parameters():
                p.copy_(torch.stack([parent[j].get_parameter(name) for j in group]).mean(dim=0))

    @torch.no_grad()
    def prolong(self, coarse: Sequence[nn.Module], parent: Sequence[nn.Module], groups: Groups, delta: float) -> None:
        for coarse_block, group in zip(coarse, groups):
            for j in group:
                _mix(parent[j], coarse_block, delta)


# ---------------------------------------------------------------------------------------------
# Views


@dataclass(eq=False)
class ModelView:
    """An ordered list of blocks run between the fine model's embeddings and head."""

    model: GPT
    blocks: list[nn.Module]
    level: int = 0
    path: tuple[int, ...] = ()  # index of the coarse model chosen at each level; () is the fine model
    parent: Optional["ModelView"] = None
    groups: Groups = field(default_factory=list)  # positions in parent.blocks
    owns_blocks: bool = False  # True when the blocks are separate storage (`average`)
    # Euler step of every block (coarsening.step_scale), or one per block (a sub-path whose blocks stand
    # for the ones it skips, mltrain/method/paths.py)
    step_size: float | tuple[float, ...] = 1.0

    def __call__(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None):
        return self.model(idx, targets, blocks=self.blocks, step_size=self.step_size)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def name(self) -> str:
        return model_name(self.path)

    def parameters(self) -> list[nn.Parameter]:
        seen: dict[int, nn.Parameter] = {}
        for module in [*self.model.shared_modules(), *self.blocks]:
            for p in module.parameters():
                seen.setdefault(id(p), p)
        return list(seen.values())


def path_key(path: tuple[int, ...]) -> str:
    """A path as the key of a checkpoint's state dicts: `0.1` (a stored format: never a display name)."""
    return ".".join(map(str, path))


def key_path(key: str) -> tuple[int, ...]:
    return tuple(int(i) for i in key.split("."))


def fine_view(model: GPT) -> ModelView:
    return ModelView(model=model, blocks=list(model.blocks))


class Hierarchy:
    """Builds the coarse views of a fine model with a scheme and moves weights between levels.

    `view(path, cycle)` is deterministic in (path, cycle): for a random scheme with `redraw`, the
    partition is drawn from (seed, cycle, path), otherwise from (seed, path), so a resumed run sees the
    same views.
    """

    def __init__(self, model: GPT, scheme: Scheme, delta: float, seed: int = 0):
        self.model, self.scheme, self.delta, self.seed = model, scheme, delta, seed
        self.fine = fine_view(model)
        self._views: dict[tuple[int, tuple[int, ...]], ModelView] = {}
        self._storage: dict[tuple[int, ...], list[nn.Module]] = {}  # owned coarse blocks, by path

    def view(self, path: tuple[int, ...], cycle: int = 0) -> ModelView:
        if not path:
            return self.fine
        draw = cycle if self.scheme.redraw else 0
        key = (draw, path)
        if key not in self._views:
            parent = self.view(path[:-1], cycle)
            groups = self.scheme.partition(parent.n_blocks, [self.seed, draw, *path[:-1]])[path[-1]]
            if self.scheme.owns_blocks:  # one storage per path, whatever the cycle
                if path not in self._storage:
                    self._storage[path] = self.scheme.coarse_blocks(parent.blocks, groups)
                blocks = self._storage[path]
            else:
                blocks = self.scheme.coarse_blocks(parent.blocks, groups)
            self._views[key] = ModelView(
                self.model, blocks, level=len(path), path=path, parent=parent, groups=groups,
                owns_blocks=self.scheme.owns_blocks, step_size=parent.step_size * self.scheme.step_factor(),
            )
        return self._views[key]

    def restrict(self, view: ModelView) -> None:
        """Initialise the coarse weights from the parent (a no-op for subset schemes)."""
        self.scheme.restrict(view.blocks, view.parent.blocks, view.groups)

    def prolong(self, view: ModelView) -> None:
        """Carry the trained coarse weights back into the parent, mixing by δ."""
        self.scheme.prolong(view.blocks, view.parent.blocks, view.groups, self.delta)

    # Owned coarse blocks (`average`); subset schemes have nothing beyond the fine model.
    def state_dict(self) -> dict:
        return {path_key(path): [b.state_dict() for b in blocks] for path, blocks in self._storage.items()}

    def load_state_dict(self, state: dict) -> None:
        for key, blocks in state.items():
            view = self.view(key_path(key))
            for block, block_state in zip(view.blocks, blocks):
                block.load_state_dict(block_state)
