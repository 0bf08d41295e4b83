"""Held-out evaluation, apart from the training step: the loss of any view on fixed held-out batches,
its eval rows, and the fingerprint of the held-out set that runs are compared on.

Its time is kept out of the run's training time (Clock.apart) and its FLOPs out of the training FLOPs
(TrainState.eval_flops).
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, Optional

import torch
import torch.nn.functional as F

from mltrain.views import ModelView
from mltrain.training import distributed
from mltrain.training.trainer import Trainer

log = logging.getLogger("mltrain")

EVAL_SEED = 1234  # the held-out batches are the same for every run and seed, so val losses compare


class Evaluator:
    """The held-out loss of the views `trainer` trains, on train.eval_batches fixed batches of
    `val_sampler` (drawn and moved to the device once)."""

    def __init__(self, trainer: Trainer, val_sampler: Any, n_batches: int):
        self.trainer, self.val_sampler, self.n_batches = trainer, val_sampler, int(n_batches)
        self._batches: Optional[list] = None

    def batches(self) -> list:
        if self._batches is None:
            self._batches = [self.trainer.to_device(self.val_sampler.batch(i)) for i in range(self.n_batches)]
        return self._batches

    def held_out(self) -> dict:
        """Size of the held-out set and a fingerprint of its tokens: runs are compared only on the same one.
        Under data parallel, of the whole batches (the ranks' slices in rank order), as in one process."""
        digest = hashlib.sha1()
        sequences = 0
        for x, y in self.batches():
            x, y = distributed.gather_rows(x), distributed.gather_rows(y)
            digest.update(x.cpu().numpy().tobytes())
            digest.update(y[:, -1:].cpu().numpy().tobytes())
            sequences += x.shape[0]
        return {"batches": self.n_batches, "sequences": sequences,
                "tokens": sequences * self.trainer.model.config.block_size, "fingerprint": digest.hexdigest()[:16]}

    @torch.no_grad()
    def loss(self, view: ModelView) -> tuple[float, float]:
        """Mean held-out loss of `view` over the fixed held-out sequences, and its standard error
        (the sample std of the per-sequence mean losses / sqrt(number of sequences))."""
        t = self.trainer
        was_training = t.model.training
        t.model.eval()
        per_sequence = []
        for x, y in self.batches():  # this rank's slice of each held-out batch
            for xs, ys in zip(x.chunk(t.grad_accum), y.chunk(t.grad_accum)):
                with t.autocast():
                    logits, _ = view(xs)
                loss = F.cross_entropy(logits.float().transpose(1, 2), ys, reduction="none")
                per_sequence.append(loss.mean(dim=1))
            t.state.eval_flops += t.flops_per_token(view.n_blocks) / 3 * x.numel() * t.world.size  # forward only
        t.model.train(was_training)
        # Every rank's per-sequence losses, so the mean and its error are the one-process figures.
        losses = distributed.gather_rows(torch.cat(per_sequence))
        se = losses.std() / math.sqrt(losses.numel()) if losses.numel() > 1 else torch.zeros((), device=losses.device)
        mean, se = torch.stack([losses.mean(), se]).tolist()  # one host sync
        return mean, se

    def log_eval(self, view: ModelView, **extra: Any) -> float:
        """Evaluate `view`, emit its eval row (and, without a progress bar, one log line); returns the loss."""
        t = self.trainer
        with t.clock.apart():
            loss, se = self.loss(view)
        row = {"step": t.state.fine_steps, "level": view.level, "val/loss": loss, "val/loss_se": se,
               **t.counters(), **extra}
        t.emit(row)
        if t.bar.disable:  # without a progress bar, one line per evaluation
            where = f" (after cycle {extra['cycle']})" if "cycle" in extra else ""
            log.info("step %d%s: val loss %.4f | %.3g FLOPs | %.0f s", row["step"], where, loss, row["flops"], row["time_s"])
        t.last_loss["val"] = loss
        t.last_loss["val_se"] = se
        return loss
