"""The one training step for every level, and its FLOP/token accounting.

`Trainer.train_step(view, optimizer, lr, sampler, kind)` trains whatever `ModelView` it is handed — the fine
model, a view of fewer blocks, a sub-path, whatever a method's phase names — so there is no copy of the
training loop per level; the LR, forward, backward, clipping, optimizer step and the step's row
metrics read in that one function, top to bottom. Apart from the step: held-out evaluation
(training/evaluation.py), the gradient diagnostics (training/diagnostics.py), the bookkeeping of train
rows and non-finite losses (training/rows.py), and the opt-in step that skips a non-finite one
(train.on_nonfinite=skip, training/skipping.py). Everything that must survive a resume lives in
`TrainState` (the counters; the plan position is the runner's), in the rows not yet written (`pending_state`), in the
`Clock` and in the samplers' own state.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from tqdm.auto import tqdm

from mltrain.model.gpt import GPT
from mltrain.model.settings import resolved_vocab
from mltrain.model.views import ModelView
from mltrain.method.kinds import StepKind
from mltrain.training import distributed
from mltrain.core.flops import train_flops_per_token
from mltrain.training.compiling import CompileWatch
from mltrain.training.optim import is_fused, set_lr
from mltrain.training.skipping import SkipNonFinite
from mltrain.training.settings import TrainConfig
from mltrain.training.rows import ROW_METRICS, NonFiniteLoss, PendingRow, SteadyRate, Step, nonfinite_error, step_name

log = logging.getLogger("mltrain")
NO_CONTEXT = contextlib.nullcontext()  # reusable: the step enters it where there is nothing to enter
FINE = StepKind.fine.value  # the fine model's own steps: `fine_steps`


@dataclass
class TrainState:
    """A run's counters. Optimizer steps and their training FLOPs are counted by step kind, one mapping
    each (`steps`, `kind_flops`): a kind a method adds (its phases' `step_kind`) is counted as any other,
    and what the counts mean is the method's to say (its summary fields)."""

    steps: dict[str, int] = field(default_factory=dict)  # optimizer steps by step kind
    kind_flops: dict[str, float] = field(default_factory=dict)  # training FLOPs by step kind
    tokens: int = 0
    flops: float = 0.0  # cumulative training FLOPs, every kind of step
    # The same sum with a step of an n-block view costed at n / n_layer of a fine step (blocks only, as
    # the paper may have counted). Equal to `flops` for fine steps.
    flops_blocks: float = 0.0
    skipped_steps: int = 0  # steps whose update was dropped for a non-finite loss (train.on_nonfinite=skip)

    @property
    def fine_steps(self) -> int:
        return self.steps.get(FINE, 0)

    @property
    def optimizer_steps(self) -> int:
        return sum(self.steps.values())

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> "TrainState":
        """The counters `state_dict()` saved; also those of a checkpoint written before the mappings, which
        kept a `<kind>_steps` (and `<kind>_flops`) field per step kind."""
        known = {f.name for f in fields(cls)}
        out = cls(**{k: v for k, v in state.items() if k in known})
        for key, value in state.items():
            kind, _, counter = key.rpartition("_")
            if key in known:
                continue
            if counter == "steps":
                out.steps[kind] = int(value)
            elif counter == "flops":
                out.kind_flops[kind] = float(value)
            else:
                raise KeyError(f"unknown train state entry {key!r}")
        return out


class Clock:
    """A run's wall time: `elapsed()` since it started (the rows' `time_s`), and `train_time()`, the part
    spent training (`train_time_s`): held-out evaluation, the diagnostics and checkpoints are timed
    `apart()`. Both go on from where they stood across a resume."""

    def __init__(self) -> None:
        self.restart()

    def restart(self, elapsed: float = 0.0, apart: float = 0.0) -> None:
        self._t0, self._apart, self._depth = time.perf_counter() - elapsed, apart, 0

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def train_time(self) -> float:
        return self.elapsed() - self._apart

    @contextlib.contextmanager
    def apart(self) -> Iterator[None]:
        """Time spent inside is not training time (nested blocks count once)."""
        start, self._depth = time.perf_counter(), self._depth + 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._apart += time.perf_counter() - start

    def state_dict(self) -> dict:
        return {"elapsed_s": self.elapsed(), "apart_s": self._apart}


class Trainer:
    """The step, and the train rows it feeds. `emit(row)` receives every metrics row (the run's RowSink,
    into which the tracker writes: run.py); evaluation and diagnostics emit through it too. It is given
    at construction and never rebound (a read-only property)."""

    def __init__(
        self,
        model: GPT,
        train_cfg: TrainConfig,
        device: torch.device,
        dtype: Optional[torch.dtype],
        emit: Callable[[dict], None],
        peak_flops: Optional[float] = None,
        world: distributed.World = distributed.World(),
        compiled: bool = False,
    ):
        self.model, self.cfg, self.device, self.dtype, self._emit = model, train_cfg, device, dtype, emit
        self._device_type = device.type
        # The step's settings, read once into plain values the step uses.
        self.grad_accum, self.grad_clip = int(train_cfg.grad_accum), float(train_cfg.grad_clip)
        self.state, self.world, self.clock = TrainState(), world, Clock()
        # MFU is per job: the FLOPs of all ranks against the peak of all their devices.
        self.peak_flops = peak_flops * world.size if peak_flops else None
        # Under data parallel, the one DistributedDataParallel wrapper every training step goes
        # through (see mltrain/training/distributed.py); None in one process.
        self.replica: Optional[Callable[..., Any]] = None  # the DDP wrapper, or its compiled form
        self.replica_parameters: list[torch.nn.Parameter] = []  # the parameters DDP reduces
        # train.compile: per-step Euler steps reach the graph as a tensor, rows say when they compiled
        self.compiled, self.compiles = compiled, CompileWatch(compiled)
        self.steady = SteadyRate()  # FLOPs and training time of the rows without a compile, per level
        self._steps: tuple[Optional[tuple], Optional[torch.Tensor]] = (None, None)
        self._idle: dict[tuple[int, ...], list[torch.nn.Parameter]] = {}  # per view: parameters it leaves out
        cfg = model.config
        self._per_token: dict[int, tuple[float, float]] = {}  # by view depth: _costs
        self._dims = (cfg.n_embd, resolved_vocab(cfg), cfg.block_size)
        self.last_loss: dict[str, float] = {}  # by step kind (and "val", "val_se"), for the summary
        self._pending: dict[str, PendingRow] = {}  # per step kind, since its last train row
        self._clip_params: dict[int, list] = {}  # per optimizer: its parameters, for gradient clipping
        # disable=None: no bar when stderr is not a terminal (CI, SLURM logs); eval lines still show
        # progress. The total (all planned optimizer steps) is set once the plan exists.
        # Ranks > 0 show no bar: rank 0 speaks for the job.
        show = train_cfg.progress and world.is_main
        self.bar = tqdm(disable=None if show else True, unit="step", dynamic_ncols=True)
        if train_cfg.on_nonfinite == "skip":  # chosen once: the common step has no test for it
            self.train_step = SkipNonFinite(self)  # type: ignore[method-assign]

    @property
    def emit(self) -> Callable[[dict], None]:
        """Where every metrics row goes: the callable the trainer was built with."""
        return self._emit

    def attach_replica(self, ddp: Any, call: Optional[Callable[..., Any]] = None) -> None:
        """Train through `ddp`, the one DistributedDataParallel wrapper (called as `call`, its compiled
        form, when given)."""
        self.replica, self._ddp = (ddp if call is None else call), ddp
        self.replica_parameters = list(ddp.module.parameters())

    # -- accounting -------------------------------------------------------------------------------
    def flops_per_token(self, n_blocks: int) -> float:
        return self._costs(n_blocks)[0]

    def _costs(self, n_blocks: int) -> tuple[float, float]:
        """(training FLOPs, FLOPs costed by blocks: the fine model's times n_blocks / n_layer) per token of
        a view of `n_blocks` blocks, computed once per depth."""
        costs = self._per_token.get(n_blocks)
        if costs is None:
            n_layer = self.model.config.n_layer
            costs = self._per_token[n_blocks] = (train_flops_per_token(n_blocks, *self._dims),
                                                 train_flops_per_token(n_layer, *self._dims) * n_blocks / n_layer)
        return costs

    def counters(self) -> dict:
        """The columns every row carries: cumulative FLOPs, tokens and time."""
        s = self.state
        return {"flops": s.flops, "flops_blocks": s.flops_blocks, "tokens": s.tokens,
                "time_s": self.clock.elapsed(), "train_time_s": self.clock.train_time()}

    def autocast(self):
        if self.dtype is None:
            return NO_CONTEXT
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def to_device(self, batch):
        """A batch on the training device (pinned and copied without waiting, on CUDA); a batch already
        there (a prefetched one, training/batches.py) as it is."""
        x, y = batch
        if x.device.type == self._device_type:
            return x, y
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device), y.to(self.device)

    # -- the step -----------------------------------------------------------------------------------
    def train_step(self, view: ModelView, optimizer: torch.optim.Optimizer, lr: float, sampler: Any,
                   kind: str) -> None:
        """One optimizer step of `view` on the next batch of `sampler`, counted as a `kind` step: the LR,
        the forward and backward (over train.grad_accum micro-batches), clipping, the optimizer step, and
        the step's share of its train row (`ROW_METRICS`, training/rows.py).

        The hot path: no host sync, no per-step allocation beyond the step's own tensors. The sampler's
        next batch is built and copied while the step runs (its `prefetch`, when it has one). Under
        train.on_nonfinite=skip the Trainer steps through `SkipNonFinite` (training/skipping.py) instead,
        chosen once when it is built and made of the same parts."""
        pending = self.row_of(kind, view)
        graphs = self.compiles.count() if self.compiled else 0
        set_lr(optimizer, lr)
        x, y = self.to_device(sampler.next_batch())
        loss = self.forward_backward(view, x, y)
        grad_norm = self.clip(optimizer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step = Step(loss, grad_norm, view, x, lr, kind)  # the row's metrics: the loss and each of ROW_METRICS
        self.record(pending, sampler, graphs, step, {name: metric(step) for name, metric in ROW_METRICS.items()})

    def row_of(self, kind: str, view: ModelView) -> PendingRow:
        """The steps of `kind` since its last train row (a new row starts now when there are none)."""
        pending = self._pending.get(kind)
        if pending is None:
            pending = self._pending[kind] = PendingRow(self.clock.train_time(), view)
        return pending

    def forward_backward(self, view: ModelView, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The forward and backward of `view` on the batch (x, y), over train.grad_accum micro-batches;
        returns the loss (detached; the mean over the micro-batches)."""
        accum, idle = self.grad_accum, self._idle_parameters(view)
        with self.compiles:  # dynamo's recompile limit reached: one line (CompileLimitError)
            if accum == 1:  # one micro-batch: the loss as it is (no chunking, no division by 1)
                with self.autocast():
                    _, part = self._forward(view, x, y, idle)
                part.backward()
                loss = part.detach()
            else:  # under DDP the gradients are reduced once, with the last micro-batch
                loss = torch.zeros((), device=self.device)
                for i, (xs, ys) in enumerate(zip(x.chunk(accum), y.chunk(accum))):
                    with self._ddp.no_sync() if self.replica is not None and i < accum - 1 else NO_CONTEXT:
                        with self.autocast():
                            _, part = self._forward(view, xs, ys, idle)
                        (part / accum).backward()
                    loss = loss + part.detach() / accum
        for p in idle:  # the zeros DDP averaged for them: the optimizer skips them, as in one process
            p.grad = None
        return loss

    def clip(self, optimizer: torch.optim.Optimizer) -> Optional[torch.Tensor]:
        """Clip the gradients of `optimizer`'s parameters to train.grad_clip; returns their global norm
        before clipping (None: train.grad_clip=0). Primes a fused SGD's momentum (`prime_momentum`)."""
        params = self._clip_params.get(id(optimizer))
        if params is None:
            params = self._clip_params[id(optimizer)] = [p for g in optimizer.param_groups for p in g["params"]]
        # clip_grad_norm_ skips parameters without a gradient (those outside the step's view)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip) if self.grad_clip > 0 else None
        if is_fused(optimizer):
            prime_momentum(optimizer, params)
        return grad_norm

    def record(self, pending: PendingRow, sampler: Any, graphs: int, step: Step, metrics: dict,
               applied: Optional[torch.Tensor] = None) -> None:
        """After the update: start the sampler's next batch, count the step, add its loss and row `metrics`
        to its row (summed on the device, read when the row is written); `applied`: the step's flag under
        train.on_nonfinite=skip."""
        prefetch = getattr(sampler, "prefetch", None)
        if prefetch is not None:
            prefetch()
        if self.compiled and self.compiles.count() != graphs:
            pending.compiled = True
        n_tokens = step.x.numel() * self.world.size  # the global batch: every rank's slice
        flops = self._count(step.kind, step.view, n_tokens)
        pending.add(step.loss, n_tokens, step.view, flops, applied, metrics)
        self.bar.update(1)

    def _forward(self, view: ModelView, x: torch.Tensor, y: torch.Tensor, idle: Sequence[torch.nn.Parameter] = ()):
        """A training forward of `view`: through the DDP wrapper under data parallel (every parameter the
        view leaves out, `idle`, gets a zero gradient there, so DDP reduces whole buckets without
        searching the graph for unused parameters); the model itself in one process."""
        steps = self._step_sizes(view.step_size)
        if self.replica is None:
            return self.model(x, y, blocks=view.blocks, step_size=steps)
        logits, loss = self.replica(x, y, view.blocks, steps)
        return logits, distributed.touch(loss, idle)

    def _step_sizes(self, steps: Any) -> Any:
        """A view's Euler steps as the model takes them: under compile, steps that change from call to
        call (a sub-path's 1/p) as a device tensor, an input of one graph, not constants of many."""
        if not self.compiled or not isinstance(steps, tuple):
            return steps
        if self._steps[0] != steps:
            t = torch.tensor(steps, dtype=torch.float32)
            if self.device.type == "cuda":
                t = t.pin_memory().to(self.device, non_blocking=True)
            self._steps = (steps, t.to(self.device))
        return self._steps[1]

    def _idle_parameters(self, view: ModelView) -> list[torch.nn.Parameter]:
        """Under data parallel, the trainable parameters the step's view does not run (other blocks, storage
        other views own), cached per set of blocks; none in one process."""
        if self.replica is None:
            return []
        key = tuple(map(id, view.blocks))
        idle = self._idle.get(key)
        if idle is None:
            if len(self._idle) >= 256:  # sub-path methods draw many sets: keep the cache bounded
                self._idle.clear()
            used = {id(p) for p in view.parameters()}
            idle = self._idle[key] = [p for p in self.replica_parameters if p.requires_grad and id(p) not in used]
        return idle

    def _count(self, kind: str, view: ModelView, n_tokens: int) -> float:
        """Add the step to the counters; returns its training FLOPs."""
        s = self.state
        per_token = self._costs(view.n_blocks)
        flops = per_token[0] * n_tokens
        s.tokens += n_tokens
        s.flops += flops
        s.flops_blocks += per_token[1] * n_tokens
        steps, kind_flops = s.steps, s.kind_flops  # by the kind's plain name (the runner passes it so)
        steps[kind] = steps.get(kind, 0) + 1
        kind_flops[kind] = kind_flops.get(kind, 0.0) + flops
        return flops

    # -- train rows ---------------------------------------------------------------------------------
    def log_train(self, kind: str, view: ModelView, lr: float, step_in_phase: int = 0, **extra: Any) -> float:
        """Write one train row: the mean loss and row metrics of the `kind` steps since its last row (one
        host sync). A row in which a graph was compiled says so (`compiled_in_row`) and has no MFU.
        `step_in_phase`: the latest step's in its phase (the runner's position), to name a bad one."""
        pending = self._pending.pop(kind)
        if pending.steps == 0:  # no step: a row kept by an older checkpoint whose steps were all skipped
            return math.nan
        means = pending.metric_means()  # the row metrics (training/rows.py ROW_METRICS)
        on_device = [name for name, value in means.items() if isinstance(value, torch.Tensor)]
        # over the steps, then the ranks: the loss and the row metrics kept on the device
        reduced = [pending.mean_loss(), *(means[name] for name in on_device)]
        if self.world.size > 1:
            reduced = distributed.mean_(reduced)
        flags = pending.applied_flags()
        if flags is None and not on_device:
            loss = reduced[0].item()
        else:  # one read: the loss, the device metrics and (skip decided on the device) which steps applied
            values = torch.cat([t.reshape(1).float() for t in reduced] + ([] if flags is None else [flags])).tolist()
            loss, applied = values[0], values[1 + len(on_device):]
            means.update(zip(on_device, values[1:1 + len(on_device)]))
            if flags is not None and not self._say_skipped(kind, pending, applied, step_in_phase):
                return math.nan
        tokens, dt = pending.tokens, max(self.clock.train_time() - pending.t_start, 1e-9)
        self.last_loss[str(kind)] = loss
        row = {"step": self.state.fine_steps, "level": view.level, "phase": str(kind), "train/loss": loss, "lr": lr,
               **means, **self.counters(), "tokens_per_s": tokens / dt, **extra}
        if pending.compiled:  # its time includes compiling: not a measure of the training speed
            row["compiled_in_row"] = True
        else:
            self.steady.add(view.level, pending.flops, dt)
            if self.peak_flops:
                row["mfu"] = pending.flops / dt / self.peak_flops
        self.emit(row)
        if not math.isfinite(loss):  # the row is written (it shows the NaN), then the run stops
            raise nonfinite_error(self.state, kind, pending, step_in_phase)  # skip mode never gets here with a bad step
        if not self.bar.disable:
            self.bar.set_postfix_str(f"{view.name} loss {loss:.3f} {tokens / dt:,.0f} tok/s", refresh=False)
        return loss

    def _say_skipped(self, kind: str, pending: PendingRow, applied: list[float], step_in_phase: int) -> bool:
        """Count and name the steps of a row that the device skipped; False when none of them applied."""
        folded = pending.folded > 0  # applied[0] then counts the folded steps
        n_applied = int(round(sum(applied)))
        skipped = pending.steps - n_applied
        self.state.skipped_steps += skipped
        now, first = self.state.optimizer_steps, pending.steps - len(applied) + folded
        for i, flag in enumerate(applied[folded:]):
            if flag < 0.5:
                bad = now - pending.steps + first + i + 1
                log.warning("non-finite loss at %s: step skipped (train.on_nonfinite=skip)",
                            step_name(self.state, pending.view, kind, bad, now, step_in_phase))
        if folded and pending.folded - applied[0] > 0.5:
            log.warning("%d earlier step(s) of the row ending at %s were skipped too (train.on_nonfinite=skip)",
                        int(round(pending.folded - applied[0])), step_name(self.state, pending.view, kind, now, now, step_in_phase))
        return n_applied > 0

    def check_finite(self, weights: bool = False, step_in_phase: int = 0) -> None:
        """Raise NonFiniteLoss if a training loss so far (with `weights`: or a weight) is not finite. One
        host sync; called before every checkpoint, so no checkpoint holds a state after a bad step.
        `step_in_phase`: the latest step's in its phase (the runner's position), to name a bad one."""
        bad = [(kind, p) for kind, p in self._pending.items() if p.steps and p.first_nonfinite() is not None]
        if not distributed.all_ranks_agree(torch.tensor(not bad)):
            kind, p = bad[0] if bad else next((k, p) for k, p in self._pending.items() if p.steps)
            raise nonfinite_error(self.state, kind, p, step_in_phase)
        if weights:
            finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
            if not bool(finite):
                raise NonFiniteLoss(f"non-finite weights after fine step {self.state.fine_steps}")

    # -- resumable state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The trainer's share of a checkpoint (entries of the runner's one mapping): its counters, the
        clock (so time_s and train_time_s go on from where they stopped), the last losses and the rows
        not yet written."""
        clock = self.clock.state_dict()
        return {"train_state": self.state.state_dict(), "elapsed_s": clock["elapsed_s"], "apart_s": clock["apart_s"],
                "last_loss": dict(self.last_loss), "pending_rows": self.pending_state()}

    def load_state_dict(self, state: dict) -> None:
        """Back to what `state_dict()` saved (`train_state`: the counters alone; training/runner.py reads
        a file's older layouts into it)."""
        self.state = TrainState.from_state(state["train_state"])
        self.clock.restart(elapsed=state["elapsed_s"], apart=state.get("apart_s", 0.0))
        self.last_loss = dict(state["last_loss"])
        self.load_pending_state(state.get("pending_rows", {}))

    def pending_state(self) -> dict:
        """The per-step losses, step and token counts of rows not yet written (their start times are not
        kept: tokens/s restarts at a resume)."""
        return {str(kind): p.state_dict() for kind, p in self._pending.items()}

    def load_pending_state(self, state: dict) -> None:
        now = self.clock.train_time()
        self._pending = {kind: PendingRow.from_state(p, now, self.device) for kind, p in state.items()}

    def close(self) -> None:
        self.bar.close()


def prime_momentum(optimizer: torch.optim.Optimizer, params: list) -> None:
    """Give every parameter of a fused SGD optimizer with momentum a zero momentum buffer before its first
    step. A zero buffer gives the first step's buffer (the gradient) exactly; without it, the fused
    kernel refuses a step in which some parameters have buffers and others do not (a sub-path or a
    view that reaches a block for the first time), and a first step skipped on the device
    leaves the buffers it allocated unwritten. O(1) once primed."""
    if len(optimizer.state) >= len(params) or not isinstance(optimizer, torch.optim.SGD):
        return
    if not optimizer.param_groups[0].get("momentum"):
        return
    with torch.no_grad():
        for p in params:
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
