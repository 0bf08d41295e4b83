"""Gradient diagnostics, apart from the training step: how well a coarse model stands in for its parent.

Before each coarse phase (the plan's `diagnose` phases) one batch of their own seeded stream gives
the losses of the coarse model and its parent and the cosine between their gradients over the
parameters they share. A measurement: no optimizer step, `.grad` untouched, its FLOPs kept out of the
training FLOPs (its own counter, `Diagnostics.flops`: summary.json's diag_flops) and its time out of the
training time (Clock.apart).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mltrain.model.views import ModelView, parent_of
from mltrain.training import distributed
from mltrain.training.trainer import Trainer


class Diagnostics:
    """The diag rows of a run: batch `index` of `sampler` for the next one, and the FLOPs measured so far
    (`flops`; both saved with a checkpoint)."""

    def __init__(self, trainer: Trainer, sampler: Any):
        self.trainer, self.sampler, self.index, self.flops = trainer, sampler, 0, 0.0

    def log_diagnostics(self, view: ModelView, cycle: int) -> None:
        """Emit the diag row of coarse model `view` against its parent."""
        t = self.trainer
        with t.clock.apart():
            batch = self.sampler.batch(self.index)
            self.index += 1
            tokens = batch[0].numel() * t.world.size  # every rank's slice
            parent = parent_of(view)
            for measured_view in (view, parent):  # a forward and backward of each
                self.flops += t.flops_per_token(measured_view.n_blocks) * tokens
            measured = gradient_agreement(t, view, parent, batch)
        t.emit({"step": t.state.fine_steps, "level": view.level, "cycle": cycle, "coarse_model": view.path[-1],
                **measured, **t.counters()})


def gradients(trainer: Trainer, view: ModelView, batch) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """Loss and gradients of `view` on `batch` via autograd.grad (no optimizer step, .grad
    untouched), in train.grad_accum chunks like a training step, so it fits where training fits.
    Under data parallel `batch` is this rank's slice and both are averaged over the ranks (the
    plain model, not the DDP wrapper: no optimizer step follows)."""
    t = trainer
    x, y = t.to_device(batch)
    params = view.parameters()
    accum = t.grad_accum
    total_loss, grads = torch.zeros((), device=t.device), [torch.zeros_like(p, dtype=torch.float32) for p in params]
    for xs, ys in zip(x.chunk(accum), y.chunk(accum)):
        with t.autocast():
            _, loss = view(xs, ys)
        for g, part in zip(grads, torch.autograd.grad(loss / accum, params)):
            g.add_(part.float())
        total_loss += loss.detach().float() / accum
    distributed.mean_([total_loss, *grads])
    return total_loss, {id(p): g for p, g in zip(params, grads)}


def gradient_agreement(trainer: Trainer, coarse: ModelView, parent: ModelView, batch) -> dict:
    """Losses of a coarse model and its parent on one batch, and the cosine between their gradients
    over the parameters they share: all of them, the shared embedding/norm/head alone, and the shared
    blocks alone. A cosine near 1 says a coarse step moves the shared weights as a parent step would."""
    coarse_loss, g_coarse = gradients(trainer, coarse, batch)
    parent_loss, g_parent = gradients(trainer, parent, batch)
    shared_ids = {id(p) for m in trainer.model.shared_modules() for p in m.parameters()}
    common = [i for i in g_coarse if i in g_parent]
    out = {"diag/coarse_loss": coarse_loss, "diag/fine_loss": parent_loss}
    for key, ids in (
        ("diag/grad_cosine", common),
        ("diag/grad_cosine_shared", [i for i in common if i in shared_ids]),
        ("diag/grad_cosine_blocks", [i for i in common if i not in shared_ids]),
    ):
        if ids:
            a = torch.cat([g_coarse[i].flatten() for i in ids])
            b = torch.cat([g_parent[i].flatten() for i in ids])
            out[key] = F.cosine_similarity(a, b, dim=0)
    values = torch.stack([v.float().reshape(()) for v in out.values()]).tolist()  # one host sync
    return dict(zip(out, values))
