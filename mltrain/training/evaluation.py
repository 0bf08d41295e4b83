"""Held-out evaluation, apart from the training step: the loss of any view on the fixed held-out set,
its eval rows, and the fingerprint of the held-out set that runs are compared on.

Its time is kept out of the run's training time (Clock.apart) and its FLOPs out of the training FLOPs
(its own counter, `Evaluator.flops`: summary.json's eval_flops).
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F

from mltrain.model.views import ModelView
from mltrain.training import distributed
from mltrain.training.trainer import Trainer

log = logging.getLogger("mltrain")


class Evaluator:
    """The held-out loss of the views `trainer` trains, on the fixed held-out set `held_out` (data/sampler.py
    `spread`: a (2, n, block_size) tensor, x then y, the whole set on every rank), `batch_size` sequences a
    forward pass (all ranks together). Under data parallel rank r evaluates rows [r·m, (r+1)·m), m =
    ceil(n / W), and the per-sequence losses are gathered, so the mean and its error are the one-process
    figures. `val_arrays`: the validation split's arrays (a checkpoint's data fingerprint)."""

    def __init__(self, trainer: Trainer, held_out: torch.Tensor, batch_size: int, val_arrays: Sequence = ()):
        self.trainer, self.held, self.val_arrays = trainer, held_out, list(val_arrays)
        self.n_sequences = int(held_out.shape[1])
        world = trainer.world.size
        self.per_rank = -(-self.n_sequences // world)
        self.chunk = max(1, min(-(-int(batch_size) // world), self.per_rank))  # this rank's sequences a forward pass
        # where each rank's real losses sit among the gathered (padded) ones
        m, n = self.per_rank, self.n_sequences
        self._kept = torch.cat([torch.arange(r * m, r * m + max(0, min(m, n - r * m))) for r in range(world)])
        self._batches: Optional[list] = None
        self.flops = 0.0  # forward FLOPs of every evaluation so far: a measurement, never on the FLOPs axis

    def state_dict(self) -> dict:
        return {"eval_flops": self.flops}

    def load_state_dict(self, state: dict) -> None:
        self.flops = float(state["eval_flops"])

    def batches(self) -> list:
        """This rank's share of the held-out set in forward passes of `chunk` sequences each, moved to the
        device once, as (x, y, k): a short last pass is padded with copies of its first row to the others'
        shape (a compiled model sees one batch shape, no recompilation), only its first k losses counted."""
        if self._batches is None:
            lo = self.trainer.world.rank * self.per_rank
            x, y = self.held[:, lo : lo + self.per_rank].unbind(0)
            self._batches = [(*self.trainer.to_device((_padded(xs, self.chunk), _padded(ys, self.chunk))), len(xs))
                             for xs, ys in zip(x.split(self.chunk), y.split(self.chunk)) if len(xs)]
            self._kept = self._kept.to(self.trainer.device)
        return self._batches

    def held_out(self) -> dict:
        """Size of the held-out set and a fingerprint of its tokens: runs are compared only on the same one.
        The same on every rank and for every batch size (computed on the host, on the whole set)."""
        x, y = self.held.unbind(0)
        digest = hashlib.sha1()
        digest.update(x.numpy().tobytes())
        digest.update(y[:, -1:].numpy().tobytes())
        block_size = int(x.shape[1])
        return {"sequences": self.n_sequences, "block_size": block_size, "tokens": self.n_sequences * block_size,
                "fingerprint": digest.hexdigest()[:16]}

    @torch.no_grad()
    def loss(self, view: ModelView) -> tuple[float, float]:
        """Mean held-out loss of `view` over the fixed held-out sequences, and its standard error
        (the sample std of the per-sequence mean losses / sqrt(number of sequences))."""
        t = self.trainer
        was_training = t.model.training
        t.model.eval()
        mine = torch.full((self.per_rank,), math.nan, device=t.device)  # padded: ranks gather equal shapes
        done = 0
        for x, y, k in self.batches():  # this rank's share, a forward pass at a time
            with t.autocast():
                logits, _ = view(x)
            loss = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")
            mine[done : done + k] = loss.mean(dim=1)[:k]
            done += k
        # forward only, the whole set (every rank counts all ranks' FLOPs, as for a training step)
        self.flops += t.flops_per_token(view.n_blocks) / 3 * self.n_sequences * self.held.shape[2]
        t.model.train(was_training)
        # Every rank's per-sequence losses, so the mean and its error are the one-process figures.
        losses = distributed.gather_rows(mine)[self._kept]
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


def _padded(rows: torch.Tensor, n: int) -> torch.Tensor:
    """`rows` with copies of its first row appended up to `n` rows (as it is when it has them)."""
    return rows if len(rows) >= n else torch.cat([rows, rows[:1].expand(n - len(rows), -1)])
