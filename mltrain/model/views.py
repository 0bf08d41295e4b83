"""Views of the fine model: a coarse model or a sub-path is an ordered list of the fine model's blocks
(or, for the `average` scheme, blocks of its own) run between its embeddings and head, with no copies.

`ModelView` is what the training step trains; `Hierarchy` builds the coarse views a coarsening scheme
(mltrain/method/coarsening.py) describes and moves weights between levels with the scheme's restriction
and prolongation; `path_view` is the view of a sub-path (mltrain/method/paths.py) a rival method's step
runs. A view of a view recurses for more than two levels (12 → 6 → 3 blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn

from mltrain.method.coarsening import Groups, Scheme
from mltrain.method.kinds import model_name
from mltrain.method.paths import SubPath
from mltrain.model.gpt import GPT


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


def path_view(model: GPT, sub: SubPath) -> ModelView:
    """A view running the blocks of `sub` of `model` between its embeddings and head (no copies)."""
    blocks = list(model.blocks)  # a list's indexing, not the ModuleList's (a sub-path method makes a view per step)
    return ModelView(model, [blocks[i] for i in sub.blocks], step_size=sub.scales or 1.0)


def parent_of(view: ModelView) -> ModelView:
    """The view `view` was coarsened from (the fine model has none: nothing moves into or out of it)."""
    if view.parent is None:
        raise ValueError(f"{view.name} is the fine model: it has no parent to restrict from or prolong into")
    return view.parent


def _uniform_step(view: ModelView) -> float:
    """The one Euler step of every block of a hierarchy's view (per-block steps are a sub-path's alone)."""
    if isinstance(view.step_size, tuple):
        raise ValueError(f"{view.name} has a step per block: a hierarchy coarsens only views with one step")
    return view.step_size


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
                owns_blocks=self.scheme.owns_blocks, step_size=_uniform_step(parent) * self.scheme.step_factor(),
            )
        return self._views[key]

    @torch.no_grad()
    def restrict(self, view: ModelView) -> None:
        """Initialise the coarse weights from the parent (a no-op for subset schemes)."""
        self.scheme.restrict(view.blocks, parent_of(view).blocks, view.groups)

    @torch.no_grad()
    def prolong(self, view: ModelView) -> None:
        """Carry the trained coarse weights back into the parent, mixing by δ."""
        self.scheme.prolong(view.blocks, parent_of(view).blocks, view.groups, self.delta)

    # Owned coarse blocks (`average`); subset schemes have nothing beyond the fine model.
    def state_dict(self) -> dict:
        return {path_key(path): [b.state_dict() for b in blocks] for path, blocks in self._storage.items()}

    def load_state_dict(self, state: dict) -> None:
        for key, blocks in state.items():
            view = self.view(key_path(key))
            for block, block_state in zip(view.blocks, blocks):
                block.load_state_dict(block_state)
