"""Multilevel training's run-time objects (method/multilevel.py `Multilevel.parts`): the hierarchy of
coarse models around the fine one, the coarse batch stream, the gradient diagnostics, and the handlers
of the restrict, diagnose and prolong phases of its plan. Its schedule control builds the same (it
trains the fine model on the coarse stream; nothing is restricted or prolonged).

The coarse stream and the diagnostics' batches have seeded streams of their own: the fine stream is
drawn by fine steps alone, so fine step n of every run with the same seed (single-level, multilevel,
control, any budget) trains on the same batch.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from mltrain.method.coarsening import build_scheme
from mltrain.method.kinds import PhaseKind
from mltrain.method.multilevel import MultilevelRun, OnCoarse
from mltrain.method.plan import train_phases
from mltrain.runtime.diagnostics import Diagnostics
from mltrain.training.parts import BuildKit, Parts
from mltrain.model.views import Hierarchy, ModelView

DIAG_SEED_OFFSET = 1_000_003
COARSE_SEED_OFFSET = 2_000_003


class MultilevelParts(Parts):
    """The hierarchy (coarsening.scheme, multilevel.delta, coarsening.seed or the run's seed), the `coarse`
    batch stream (multilevel.coarse_batch_size) and the diagnostics (their own stream of
    train.batch_size batches)."""

    def __init__(self, method: Any, kit: BuildKit):
        super().__init__(kit)
        cfg: MultilevelRun = method.cfg
        c, ml = cfg.coarsening, cfg.multilevel
        self.hierarchy = Hierarchy(kit.model, build_scheme(c), ml.delta, seed=cfg.seed if c.seed is None else c.seed)
        self.fine = self.hierarchy.fine
        self.streams = {"coarse": kit.stream(ml.coarse_batch_size or cfg.train.batch_size,
                                             cfg.seed + COARSE_SEED_OFFSET)}
        self.diagnostics = Diagnostics(kit.trainer, kit.sampler(cfg.train.batch_size, cfg.seed + DIAG_SEED_OFFSET))

    def view(self, path: tuple[int, ...], cycle: int) -> ModelView:
        return self.hierarchy.view(path, cycle)

    def storage(self, plan: list) -> list[torch.nn.Module]:
        """The blocks coarse models own (the `average` scheme), made now for every coarse model the plan
        trains (mltrain/training/distributed.py)."""
        blocks: list[torch.nn.Module] = []
        for path in dict.fromkeys(p.trains for p in train_phases(plan) if p.trains):
            view = self.hierarchy.view(path)
            if view.owns_blocks:
                blocks += view.blocks
        return blocks

    def handlers(self) -> dict[str, Callable[..., bool]]:
        return {PhaseKind.restrict.value: self._restrict, PhaseKind.diagnose.value: self._diagnose,
                PhaseKind.prolong.value: self._prolong}

    def _coarse_view(self, phase: OnCoarse) -> ModelView:
        """The coarse model a restrict, diagnose or prolong phase acts on."""
        return self.hierarchy.view(phase.coarse, phase.cycle or 0)

    def _restrict(self, ctx: Any, phase: OnCoarse) -> bool:
        self.hierarchy.restrict(self._coarse_view(phase))
        return True

    def _diagnose(self, ctx: Any, phase: OnCoarse) -> bool:
        self.diagnostics.log_diagnostics(self._coarse_view(phase), phase.cycle or 0)
        return True

    def _prolong(self, ctx: Any, phase: OnCoarse) -> bool:
        self.hierarchy.prolong(self._coarse_view(phase))
        return True

    def measured_flops(self) -> float:
        return self.diagnostics.flops

    # The checkpoint entries (the first two as the runner's state has always named them).
    def state_dict(self) -> dict[str, Any]:
        return {"coarse_storage": self.hierarchy.state_dict(), "diag_index": self.diagnostics.index,
                "diag_flops": self.diagnostics.flops}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.hierarchy.load_state_dict(state["coarse_storage"])
        self.diagnostics.index = int(state["diag_index"])
        self.diagnostics.flops = float(state["diag_flops"])
