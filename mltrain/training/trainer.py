"""One training-step function for every level, evaluation, and per-step FLOP/token accounting.

`Trainer.step(view, optimizer, lr, sampler)` trains whatever `ModelView` it is handed — the fine model,
a coarse model, or the fine model inside the schedule control — so there is no copy of the training loop
per level. Everything that must survive a resume lives in `TrainState` (counters and the plan position),
in the loss accumulators of rows not yet written (`pending_state`) and in the samplers' own state.

Non-finite losses (train.on_nonfinite): `stop` adds nothing to a step. The row's per-step losses stay
on the device (`_Pending`); the host looks at them where it syncs anyway: when a train row is written
(its mean is not finite: the row is written, then the run stops naming the first bad step), and before
every checkpoint (`check_finite`), so no checkpoint ever holds a state after a bad step. The run trains
on for at most one logging interval after the bad step. `skip` must decide before the optimizer step
whether to apply it, which needs the loss on the host: one sync per step.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mltrain.training import distributed
from mltrain.method.coarsening import ModelView
from mltrain.training.flops import train_flops_per_token
from mltrain.training.optim import set_lr

log = logging.getLogger("mltrain")

EVAL_SEED = 1234  # the held-out batches are the same for every run and seed, so val losses compare


class NonFiniteLoss(RuntimeError):
    """A training loss (or, at a checkpoint, a weight) is NaN or infinite; the message names the step,
    level and phase."""


@dataclass
class TrainState:
    fine_steps: int = 0
    coarse_steps: int = 0  # optimizer steps at any coarse level
    control_steps: int = 0  # fine-model steps taken in place of coarse phases (schedule control)
    tokens: int = 0
    flops: float = 0.0  # cumulative training FLOPs, all levels
    coarse_flops: float = 0.0
    # The same sum with a step of an n-block view costed at n / n_layer of a fine step (blocks only, as
    # the paper may have counted: a coarse step = 1/k of a fine one). Equal to `flops` for fine steps.
    flops_blocks: float = 0.0
    # Measurements, never on the FLOPs axis: the per-cycle diagnostics and held-out evaluation.
    diag_flops: float = 0.0
    eval_flops: float = 0.0
    phase_index: int = 0  # position in the multilevel plan
    step_in_phase: int = 0
    skipped_steps: int = 0  # steps whose update was dropped for a non-finite loss (train.on_nonfinite=skip)

    @property
    def optimizer_steps(self) -> int:
        return self.fine_steps + self.coarse_steps + self.control_steps

    def state_dict(self) -> dict:
        return asdict(self)


class _Pending:
    """One phase kind's steps since its last train row. Losses stay on the device (no host sync per
    step) as a list of detached scalars, summed once per row; past COLLAPSE entries they are folded
    into one, so a long log interval holds no more than that (looking for a non-finite loss first:
    one host sync per COLLAPSE steps)."""

    COLLAPSE = 256
    __slots__ = ("losses", "folded", "first_bad", "steps", "tokens", "blocks", "t_start", "view")

    def __init__(self, t_start: float, view: Optional[ModelView] = None):
        self.losses: list[torch.Tensor] = []
        self.folded = 0  # how many steps losses[0] stands for (0: losses[i] is step i)
        self.first_bad: Optional[int] = None  # the first non-finite step found at a fold
        self.steps, self.tokens, self.t_start, self.view = 0, 0, t_start, view
        self.blocks = 0  # blocks run, summed over the steps (a sub-path method runs fewer some steps)

    def add(self, loss: torch.Tensor, tokens: int, view: ModelView) -> None:
        self.losses.append(loss)
        self.steps += 1
        self.tokens += tokens
        self.blocks += view.n_blocks if view is not None else 0
        self.view = view
        if len(self.losses) >= self.COLLAPSE:
            if self.first_bad is None:
                self.first_bad = self._scan()
            self.losses = [torch.stack(self.losses).sum()]
            self.folded = self.steps

    def mean_loss(self) -> torch.Tensor:
        return torch.stack(self.losses).sum() / self.steps

    def _scan(self) -> Optional[int]:
        ok = torch.isfinite(torch.stack(self.losses))
        if bool(ok.all()):
            return None
        i = int((~ok).nonzero()[0, 0])
        return i if not self.folded else max(self.folded - 1 + i, 0)

    def first_nonfinite(self) -> Optional[int]:
        """Which of this row's steps (0-based) first had a non-finite loss, or None. One host sync."""
        if self.first_bad is not None or not self.losses:
            return self.first_bad
        return self._scan()

    def state_dict(self) -> dict:
        return {"losses": torch.stack(self.losses).clone() if self.losses else torch.zeros(0),
                "folded": self.folded, "first_bad": self.first_bad, "steps": self.steps, "tokens": self.tokens,
                "blocks": self.blocks}

    @classmethod
    def from_state(cls, state: dict, t_start: float, device: torch.device) -> "_Pending":
        p = cls(t_start)
        p.losses = list(state["losses"].to(device).unbind())
        p.folded, p.first_bad = int(state["folded"]), state["first_bad"]
        p.steps, p.tokens, p.blocks = int(state["steps"]), int(state["tokens"]), int(state.get("blocks", 0))
        return p


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_cfg: Any,
        device: torch.device,
        dtype: Optional[torch.dtype],
        val_sampler: Any,
        log: Callable[[dict], None],
        peak_flops: Optional[float] = None,
        world: distributed.World = distributed.World(),
    ):
        self.model, self.cfg, self.device, self.dtype = model, train_cfg, device, dtype
        # The step's settings as plain values: an OmegaConf read costs ~20 µs, too much per step.
        self.grad_accum, self.grad_clip = int(train_cfg.grad_accum), float(train_cfg.grad_clip)
        self.val_sampler, self.log = val_sampler, log
        self.state = TrainState()
        self.world = world
        # MFU is per job: the FLOPs of all ranks against the peak of all their devices.
        self.peak_flops = peak_flops * world.size if peak_flops else None
        # Under data parallel, the one DistributedDataParallel wrapper every training step goes
        # through (see mltrain/training/distributed.py); None in one process.
        self.replica: Optional[torch.nn.Module] = None
        cfg = model.config
        self._flops_per_token: dict[int, float] = {}
        self._dims = (cfg.n_embd, cfg.vocab_size, cfg.block_size)
        self.t0 = time.perf_counter()
        self.last_loss: dict[str, float] = {}  # by phase kind, for the summary
        self._pending: dict[str, _Pending] = {}  # per phase kind, since its last train row
        self._clip_params: dict[int, list] = {}  # per optimizer: its parameters, for gradient clipping
        self._val_batches: Optional[list] = None  # the fixed held-out batches, on the device
        self.skip_nonfinite = train_cfg.on_nonfinite == "skip"
        # disable=None: no bar when stderr is not a terminal (CI, SLURM logs); eval lines still show
        # progress. The total (all planned optimizer steps) is set once the plan exists.
        # Ranks > 0 show no bar: rank 0 speaks for the job.
        show = train_cfg.progress and world.is_main
        self.bar = tqdm(disable=None if show else True, unit="step", dynamic_ncols=True)

    # -- accounting -------------------------------------------------------------------------------
    def flops_per_token(self, n_blocks: int) -> float:
        if n_blocks not in self._flops_per_token:
            self._flops_per_token[n_blocks] = train_flops_per_token(n_blocks, *self._dims)
        return self._flops_per_token[n_blocks]

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def _to_device(self, batch):
        x, y = batch
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device), y.to(self.device)

    # -- the step -----------------------------------------------------------------------------------
    def step(self, view: ModelView, optimizer: torch.optim.Optimizer, lr: float, sampler: Any, kind: str) -> None:
        """One optimizer step of `view` on the next batch of `sampler`; `kind` is fine|coarse|control.

        The hot path: no host sync, no per-step allocation beyond the step's own tensors; with one
        micro-batch the loss is used as it is (no chunking, no division by 1)."""
        pending = self._pending.get(kind)
        if pending is None:
            pending = self._pending[kind] = _Pending(time.perf_counter(), view)
        set_lr(optimizer, lr)
        x, y = self._to_device(sampler.next_batch())
        accum = self.grad_accum
        if accum == 1:
            with self.autocast():
                _, loss = self._forward(view, x, y)
            loss.backward()
            loss = loss.detach()
        else:
            loss = torch.zeros((), device=self.device)
            for i, (xs, ys) in enumerate(zip(x.chunk(accum), y.chunk(accum))):
                # Under DDP the gradients are reduced once, with the last micro-batch.
                sync = self.replica is None or i == accum - 1
                with contextlib.nullcontext() if sync else self.replica.no_sync():
                    with self.autocast():
                        _, part = self._forward(view, xs, ys)
                    (part / accum).backward()
                loss += part.detach() / accum
        grad_norm = None
        if self.grad_clip > 0:
            # clip_grad_norm_ skips parameters without a gradient (those outside a coarse view).
            params = self._clip_params.get(id(optimizer))
            if params is None:
                params = self._clip_params[id(optimizer)] = [p for g in optimizer.param_groups for p in g["params"]]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        s = self.state
        applied = True
        if self.skip_nonfinite:
            finite = torch.isfinite(loss)
            if grad_norm is not None:
                finite = finite & torch.isfinite(grad_norm)
            # the one host sync per step that `skip` costs; every rank takes the same decision
            applied = distributed.all_ranks_agree(finite)
            if not applied:
                s.skipped_steps += 1
        if applied:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        n_tokens = x.numel() * self.world.size  # the global batch: every rank's slice
        flops = self.flops_per_token(view.n_blocks) * n_tokens
        s.tokens += n_tokens
        s.flops += flops
        s.flops_blocks += self.flops_per_token(self.model.config.n_layer) * n_tokens * view.n_blocks / self.model.config.n_layer
        if kind == "fine":
            s.fine_steps += 1
        elif kind == "coarse":
            s.coarse_steps += 1
            s.coarse_flops += flops
        else:
            s.control_steps += 1
        if applied:
            pending.add(loss, n_tokens, view)
        else:
            log.warning("non-finite loss at %s: step skipped (train.on_nonfinite=skip)",
                        self._where(view, kind, s.optimizer_steps, s.optimizer_steps, in_step=True))
        self.bar.update(1)

    def _forward(self, view: ModelView, x: torch.Tensor, y: torch.Tensor):
        """A training forward of `view`: through the DDP wrapper under data parallel, so its backward
        averages the gradients over the ranks; the view itself in one process."""
        if self.replica is None:
            return view(x, y)
        return self.replica(x, y, view.blocks, view.step_size)

    def _where(self, view: ModelView, kind: str, bad_step: int, now: int, in_step: bool = False) -> str:
        """Names optimizer step `bad_step` of the current row's steps (`now` is the latest): its fine
        step, level and phase. A row's steps are all of one kind and, for coarse ones, of one phase.
        `in_step`: called from within `step`, before the runner has counted the step in its phase."""
        s = self.state
        back = now - bad_step
        where = f"level {view.level}, {kind} phase"
        if view.path:
            where += f" of {view.name}"
        if kind == "fine":
            return f"fine step {s.fine_steps - back} ({where})"
        return f"{kind} step {s.step_in_phase + in_step - back} of the phase after fine step {s.fine_steps} ({where})"

    def _nonfinite(self, kind: str, pending: "_Pending") -> NonFiniteLoss:
        """The error naming the first non-finite step of `pending` (this rank's; under data parallel a
        rank whose own losses are finite names the row's last step)."""
        now = self.state.optimizer_steps
        first = pending.first_nonfinite()
        bad = now - pending.steps + (first if first is not None else pending.steps - 1) + 1
        where = self._where(pending.view, kind, bad, now) if pending.view is not None else f"a {kind} step"
        return NonFiniteLoss(f"non-finite training loss at {where}")

    def check_finite(self, weights: bool = False) -> None:
        """Raise NonFiniteLoss if a training loss so far (with `weights`: or a weight) is not finite. One
        host sync; called before every checkpoint, so no checkpoint holds a state after a bad step."""
        bad = [(kind, p) for kind, p in self._pending.items() if p.steps and p.first_nonfinite() is not None]
        if not distributed.all_ranks_agree(torch.tensor(not bad)):
            kind, p = bad[0] if bad else next((k, p) for k, p in self._pending.items() if p.steps)
            raise self._nonfinite(kind, p)
        if weights:
            finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
            if not bool(finite):
                raise NonFiniteLoss(f"non-finite weights after fine step {self.state.fine_steps}")

    def log_train(self, kind: str, view: ModelView, lr: float, **extra: Any) -> float:
        """Write one train row: the mean loss of the `kind` steps since its last row (one host sync)."""
        pending = self._pending.pop(kind)
        if pending.steps == 0:  # every step since the last row was skipped (train.on_nonfinite=skip)
            return math.nan
        loss = distributed.mean_([pending.mean_loss()])[0].item()  # over the steps, then the ranks
        tokens = pending.tokens
        dt = max(time.perf_counter() - pending.t_start, 1e-9)
        self.last_loss[kind] = loss
        row = {
            "step": self.state.fine_steps,
            "level": view.level,
            "phase": kind,
            "train/loss": loss,
            "lr": lr,
            "blocks": pending.blocks / pending.steps,  # mean blocks run per step since the last row
            **self.counters(),
            "tokens_per_s": tokens / dt,
            **extra,
        }
        if view.path:
            row["coarse_model"] = view.path[-1]
        if self.peak_flops:
            row["mfu"] = self.flops_per_token(view.n_blocks) * tokens / dt / self.peak_flops
        self.log(row)
        if not math.isfinite(loss):  # the row is written (it shows the NaN), then the run stops
            raise self._nonfinite(kind, pending)  # skip mode never gets here with a bad step
        self.bar.set_postfix_str(f"{view.name} loss {loss:.3f} {tokens / dt:,.0f} tok/s", refresh=False)
        return loss

    # -- resumable accumulators ---------------------------------------------------------------------
    def pending_state(self) -> dict:
        """The per-step losses, step and token counts of rows not yet written (their start times are not
        kept: time columns restart at a resume)."""
        return {kind: p.state_dict() for kind, p in self._pending.items()}

    def load_pending_state(self, state: dict) -> None:
        now = time.perf_counter()
        self._pending = {kind: _Pending.from_state(p, now, self.device) for kind, p in state.items()}

    def counters(self) -> dict:
        s = self.state
        return {"flops": s.flops, "flops_blocks": s.flops_blocks, "tokens": s.tokens, "time_s": self.elapsed()}

    # -- evaluation ---------------------------------------------------------------------------------
    def val_batches(self) -> list:
        """The fixed held-out batches (train.eval_batches of them), drawn and moved to the device once."""
        if self._val_batches is None:
            self._val_batches = [self._to_device(self.val_sampler.batch(i)) for i in range(self.cfg.eval_batches)]
        return self._val_batches

    def held_out(self) -> dict:
        """Size of the held-out set and a fingerprint of its tokens: runs are compared only on the same one.
        Under data parallel, of the whole batches (the ranks' slices in rank order), as in one process."""
        digest = hashlib.sha1()
        sequences = 0
        for x, y in self.val_batches():
            x, y = distributed.gather_rows(x), distributed.gather_rows(y)
            digest.update(x.cpu().numpy().tobytes())
            digest.update(y[:, -1:].cpu().numpy().tobytes())
            sequences += x.shape[0]
        return {"batches": self.cfg.eval_batches, "sequences": sequences, "tokens": sequences * self.model.config.block_size,
                "fingerprint": digest.hexdigest()[:16]}

    @torch.no_grad()
    def evaluate(self, view: ModelView) -> tuple[float, float]:
        """Mean held-out loss of `view` over the fixed held-out sequences, and its standard error
        (the sample std of the per-sequence mean losses / sqrt(number of sequences))."""
        was_training = self.model.training
        self.model.eval()
        per_sequence = []
        for x, y in self.val_batches():  # this rank's slice of each held-out batch
            for xs, ys in zip(x.chunk(self.cfg.grad_accum), y.chunk(self.cfg.grad_accum)):
                with self.autocast():
                    logits, _ = view(xs)
                loss = F.cross_entropy(logits.float().transpose(1, 2), ys, reduction="none")
                per_sequence.append(loss.mean(dim=1))
            self.state.eval_flops += self.flops_per_token(view.n_blocks) / 3 * x.numel() * self.world.size  # forward only
        self.model.train(was_training)
        # Every rank's per-sequence losses, so the mean and its error are the one-process figures.
        losses = distributed.gather_rows(torch.cat(per_sequence))
        se = losses.std() / math.sqrt(losses.numel()) if losses.numel() > 1 else torch.zeros(())
        return losses.mean().item(), se.item()

    def log_eval(self, view: ModelView, **extra: Any) -> float:
        t_start = time.perf_counter()
        loss, se = self.evaluate(view)
        for pending in self._pending.values():  # keep evaluation time out of the rows' tokens/s
            pending.t_start += time.perf_counter() - t_start
        row = {"step": self.state.fine_steps, "level": view.level, "val/loss": loss, "val/loss_se": se,
               **self.counters(), **extra}
        self.log(row)
        if self.bar.disable:  # without a progress bar, one line per evaluation
            where = f" (after cycle {extra['cycle']})" if "cycle" in extra else ""
            log.info("step %d%s: val loss %.4f | %.3g FLOPs | %.0f s", row["step"], where, loss, row["flops"], row["time_s"])
        self.last_loss["val"] = loss
        self.last_loss["val_se"] = se
        return loss

    def gradients(self, view: ModelView, batch) -> tuple[float, dict[int, torch.Tensor]]:
        """Loss and gradients of `view` on `batch` via autograd.grad (no optimizer step, .grad
        untouched), in train.grad_accum chunks like a training step, so it fits where training fits.
        Under data parallel `batch` is this rank's slice and both are averaged over the ranks (the
        plain model, not the DDP wrapper: no optimizer step follows)."""
        x, y = self._to_device(batch)
        self.state.diag_flops += self.flops_per_token(view.n_blocks) * x.numel() * self.world.size
        params = view.parameters()
        accum = self.cfg.grad_accum
        total_loss, grads = torch.zeros((), device=self.device), [torch.zeros_like(p, dtype=torch.float32) for p in params]
        for xs, ys in zip(x.chunk(accum), y.chunk(accum)):
            with self.autocast():
                _, loss = view(xs, ys)
            for g, part in zip(grads, torch.autograd.grad(loss / accum, params)):
                g.add_(part.float())
            total_loss += loss.detach().float() / accum
        distributed.mean_([total_loss, *grads])
        return total_loss.item(), {id(p): g for p, g in zip(params, grads)}

    def gradient_agreement(self, coarse: ModelView, parent: ModelView, batch) -> dict:
        """The review's evidence: losses of a coarse model and its parent on one batch, and the cosine
        between their gradients over the parameters they share (all of them, the shared embedding/norm/
        head alone, and the shared blocks alone). Measurement only: not counted as training FLOPs."""
        coarse_loss, g_coarse = self.gradients(coarse, batch)
        parent_loss, g_parent = self.gradients(parent, batch)
        shared_ids = {id(p) for m in self.model.shared_modules() for p in m.parameters()}
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
                out[key] = F.cosine_similarity(a, b, dim=0).item()
        return out

    def close(self) -> None:
        self.bar.close()
