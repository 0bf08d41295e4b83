"""train.on_nonfinite=skip: the step whose update is dropped when its loss or gradient norm is not finite.

Opt-in: the Trainer chooses it once, when it is built (`Trainer.train_step` is the common step, with no
test for it), and it is made of the common step's parts (`Trainer.forward_backward`, `clip`, `record`).
Every rank takes the same decision. With a fused optimizer the decision stays on the device (the kernel
skips the update itself when its `found_inf` is set: no host sync); an unfused one (the CPU's, where the
read is free) reads it on the host. Either way the step's row keeps its applied flag (a skipped step's
loss is left out of the row's mean, training/rows.py); which steps were skipped is read, counted and
named where the row is written (`Trainer.log_train`), in the row's one host sync.
"""

from __future__ import annotations

from typing import Any

import torch

from mltrain.training import distributed
from mltrain.training.optim import is_fused, set_lr
from mltrain.training.rows import ROW_METRICS, Step
from mltrain.model.views import ModelView


class SkipNonFinite:
    """`Trainer.train_step` under train.on_nonfinite=skip, for one `trainer`."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def __call__(self, view: ModelView, optimizer: torch.optim.Optimizer, lr: float, sampler: Any,
                 kind: str) -> None:
        t = self.trainer
        pending = t.row_of(kind, view)
        graphs = t.compiles.count() if t.compiled else 0
        set_lr(optimizer, lr)
        x, y = t.to_device(sampler.next_batch())
        loss = t.forward_backward(view, x, y)
        grad_norm = t.clip(optimizer)
        finite = torch.isfinite(loss) if grad_norm is None else torch.isfinite(loss) & torch.isfinite(grad_norm)
        finite = distributed.agree_on_device(finite)  # every rank takes the same decision
        step_if(optimizer, finite)
        optimizer.zero_grad(set_to_none=True)
        step = Step(loss, grad_norm, view, x, lr, kind)
        t.record(pending, sampler, graphs, step, {name: metric(step) for name, metric in ROW_METRICS.items()},
                 applied=finite)


def step_if(optimizer: torch.optim.Optimizer, finite: torch.Tensor) -> None:
    """`optimizer.step()` where `finite` (a boolean scalar) is true: decided by a fused optimizer's kernel
    on the device (`found_inf`), on the host for an unfused one."""
    if not is_fused(optimizer):
        if bool(finite):
            optimizer.step()
        return
    optimizer.found_inf = (~finite).to(torch.float32)  # type: ignore[attr-defined]  # read by the fused kernel
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]
