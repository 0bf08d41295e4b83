"""What a depth method builds for its run beyond the fine model, the fine optimizer and the fine batch
stream: its `Parts`, made by the method's build hook (method/registry.py `DepthMethod.build`) from a
`BuildKit`.

The runner asks a run's parts for what a plan names and the generic code does not have: the view a train
phase's `trains` path names, the batch streams a phase's `batches` names besides `fine`, the handlers of
the method's own kinds of phase, the modules its views own (which a data-parallel wrapper must cover),
and their state in a checkpoint. The default (`Parts`) has none of them: single-level training and the
rivals train the fine model through sub-paths, which the runner makes itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from mltrain.core.errors import ConfigError
from mltrain.model.gpt import GPT
from mltrain.model.views import ModelView, fine_view
from mltrain.training.run_config import RunConfig
from mltrain.training.trainer import Trainer


@dataclass
class BuildKit:
    """What a build hook makes a method's objects from: the run's settings, the fine model, the trainer,
    and two ways to draw batches of the training split: `stream(batch_size, seed)` a stream a train phase
    can name (prefetched onto the device, its position saved in checkpoints), `sampler(batch_size, seed)`
    a sampler read by index (a measurement's batches)."""

    cfg: RunConfig
    model: GPT
    trainer: Trainer
    device: torch.device
    stream: Callable[[int, int], Any]
    sampler: Callable[[int, int], Any]


class Parts:
    """A run's objects beyond the fine model (see the module docstring); the default has none."""

    def __init__(self, kit: BuildKit):
        self.fine: ModelView = fine_view(kit.model)
        self.streams: dict[str, Any] = {}  # batch streams by the name a phase's `batches` gives

    def view(self, path: tuple[int, ...], cycle: int) -> ModelView:
        """The view a train phase's `trains` path names (in cycle `cycle` of the plan)."""
        raise ConfigError(f"the plan trains the model at path {path}, but its depth method builds no model "
                          "besides the fine one (no `parts` of its own)")

    def storage(self, plan: list) -> list[torch.nn.Module]:
        """Modules the views of `plan` own besides the fine model's (made now, so that a data-parallel
        wrapper built next covers them)."""
        return []

    def handlers(self) -> dict[str, Callable[..., bool]]:
        """The handlers of the method's own kinds of phase, by kind: `fn(ctx, phase) -> bool` (training/runner.py
        PhaseHandler, PhaseContext)."""
        return {}

    def measured_flops(self) -> float:
        """FLOPs of the method's own measurements so far (summary.json's diag_flops), never on the FLOPs axis."""
        return 0.0

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of these objects, as entries of the runner's state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from the runner's state (`state_dict()`'s entries among it)."""
