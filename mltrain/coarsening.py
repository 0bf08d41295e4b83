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

Views share the fine model's embedding, final norm and head (no copies), and a view of a view recurses
for more than two levels (12 → 6 → 3 blocks).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from mltrain.config import ConfigError
from mltrain.model import GPT


class CoarseningError(ConfigError):
    """A scheme that cannot coarsen this model (depth not divisible, unknown scheme, k < 2)."""


def check_depth(scheme: str, k: int, n_layer: int, levels: int) -> None:
    """Fail with one clear message unless every level of the hierarchy divides evenly."""
    if scheme == "none":
        return
    if k < 2:
        raise CoarseningError(f"coarsening.k={k} must be >= 2 (scheme {scheme})")
    n = n_layer
    for level in range(1, levels):
        if n % k:
            what = (
                f"model.n_layer={n_layer} is not divisible by coarsening.k={k}"
                if level == 1
                else f"multilevel.levels={levels} is more than the depth allows: level {level} would "
                f"split {n} blocks by k={k} (n_layer={n_layer} must be divisible by k^(levels-1)={k ** (levels - 1)})"
            )
            raise CoarseningError(f"{what} (coarsening.scheme={scheme})")
        n //= k


# ---------------------------------------------------------------------------------------------
# Partitions: groups of parent positions for each coarse model


def _groups_from_selection(selected: Sequence[int], n_parent: int) -> list[tuple[int, ...]]:
    """Each selected position with the non-selected positions after it, up to the next selected one."""
    selected = sorted(selected)
    bounds = list(selected[1:]) + [n_parent]
    return [tuple(range(s, e)) for s, e in zip(selected, bounds)]


def partition(scheme: str, k: int, n_parent: int, seed: Sequence[int] = (0,)) -> list[list[tuple[int, ...]]]:
    """The coarse models of a parent with n_parent blocks: one list of groups per coarse model.

    `seed` (a sequence of ints, for numpy's SeedSequence) only matters for `random`.
    """
    if scheme == "stride":
        return [_groups_from_selection(range(r, n_parent, k), n_parent) for r in range(k)]
    if scheme == "random":
        perm = np.random.default_rng(list(seed)).permutation(n_parent)
        size = n_parent // k
        return [_groups_from_selection(perm[i * size : (i + 1) * size].tolist(), n_parent) for i in range(k)]
    if scheme == "average":
        return [[tuple(range(i, i + k)) for i in range(0, n_parent, k)]]
    raise CoarseningError(f"unknown coarsening scheme {scheme!r} (none, stride, random, average)")


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
    groups: list[tuple[int, ...]] = field(default_factory=list)  # positions in parent.blocks
    owns_blocks: bool = False  # True for `average`: blocks are separate storage

    def __call__(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None):
        return self.model(idx, targets, blocks=self.blocks)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def name(self) -> str:
        return "fine" if not self.path else "coarse " + ".".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] for i in self.path)

    def parameters(self) -> list[nn.Parameter]:
        seen: dict[int, nn.Parameter] = {}
        for module in [*self.model.shared_modules(), *self.blocks]:
            for p in module.parameters():
                seen.setdefault(id(p), p)
        return list(seen.values())


def fine_view(model: GPT) -> ModelView:
    return ModelView(model=model, blocks=list(model.blocks))


class Hierarchy:
    """Builds the coarse views of a fine model and moves weights between levels.

    `view(path, cycle)` is deterministic in (path, cycle): for `random` with `redraw`, the permutation is
    drawn from (seed, cycle, path), otherwise from (seed, path), so a resumed run sees the same views.
    """

    def __init__(self, model: GPT, scheme: str, k: int, delta: float, seed: int = 0, redraw: bool = False):
        self.model, self.scheme, self.k, self.delta = model, scheme, k, delta
        self.seed = seed
        self.redraw = redraw and scheme == "random"  # only a random partition can change between cycles
        self.fine = fine_view(model)
        self._views: dict[tuple[int, tuple[int, ...]], ModelView] = {}
        self._storage: dict[tuple[int, ...], list[nn.Module]] = {}  # `average`: coarse blocks by path

    def view(self, path: tuple[int, ...], cycle: int = 0) -> ModelView:
        if not path:
            return self.fine
        key = (cycle if self.redraw else 0, path)
        if key not in self._views:
            parent = self.view(path[:-1], cycle)
            seed = [self.seed, cycle if self.redraw else 0, *path[:-1]]
            groups = partition(self.scheme, self.k, parent.n_blocks, seed=seed)[path[-1]]
            if self.scheme == "average":
                if path not in self._storage:
                    template = parent.blocks[0]
                    self._storage[path] = [copy.deepcopy(template) for _ in groups]
                blocks, owns = self._storage[path], True
            else:
                blocks, owns = [parent.blocks[g[0]] for g in groups], False
            self._views[key] = ModelView(self.model, blocks, level=len(path), path=path, parent=parent,
                                         groups=groups, owns_blocks=owns)
        return self._views[key]

    @torch.no_grad()
    def restrict(self, view: ModelView) -> None:
        """Initialise the coarse weights from the parent. A no-op for subset schemes (shared blocks)."""
        if not view.owns_blocks:
            return
        for coarse_block, group in zip(view.blocks, view.groups):
            members = [view.parent.blocks[j] for j in group]
            for name, p in coarse_block.named_parameters():
                stacked = torch.stack([m.get_parameter(name) for m in members])
                p.copy_(stacked.mean(dim=0))

    @torch.no_grad()
    def prolong(self, view: ModelView) -> None:
        """Carry the trained coarse weights back into the parent, mixing by δ."""
        d = self.delta
        for coarse_block, group in zip(view.blocks, view.groups):
            targets = group if view.owns_blocks else group[1:]  # a subset's selected block already holds them
            for j in targets:
                target = view.parent.blocks[j]
                for name, p in target.named_parameters():
                    p.mul_(1.0 - d).add_(coarse_block.get_parameter(name), alpha=d)

    # `average` keeps coarse blocks of its own; subset schemes have nothing beyond the fine model.
    def state_dict(self) -> dict:
        return {".".join(map(str, path)): [b.state_dict() for b in blocks] for path, blocks in self._storage.items()}

    def load_state_dict(self, state: dict) -> None:
        for key, blocks in state.items():
            view = self.view(tuple(int(i) for i in key.split(".")))
            for block, block_state in zip(view.blocks, blocks):
                block.load_state_dict(block_state)
