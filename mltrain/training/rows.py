"""Train rows and non-finite losses: the steps since a row was written, and naming a bad step.

A train row is the mean loss of the steps of one step kind since its last row. Their losses stay on
the device (`PendingRow`: no host sync per step) and are summed once, when the row is written.

Non-finite losses (train.on_nonfinite): `stop` adds nothing to a step. The host looks at the pending
losses where it syncs anyway: when a train row is written (its mean is not finite: the row is written,
then the run stops naming the first bad step), and before every checkpoint (`Trainer.check_finite`), so
no checkpoint ever holds a state after a bad step. The run trains on for at most one logging interval
after the bad step. `skip` decides on the device whether the optimizer step applies (training/trainer.py):
a skipped step's loss is kept as 0 with an applied flag of 0, and the row's mean is over the applied
steps; which steps were skipped is read where the row is written, in the same host sync.

Row metrics: besides the loss, a train row carries the mean over its steps of every entry of
`ROW_METRICS`, a function of the step (`Step`: its loss, gradient norm, view, batch, LR, kind) that
returns a number or a device scalar. A new metric on every row is one entry there (`@row_metric`):
the step computes it, `PendingRow` sums it (on the device: read in the row's one host sync), a
checkpoint keeps the sums of rows not yet written, and metrics.jsonl and W&B get the key as it is
named (W&B plots `train/*` keys against FLOPs).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import torch

from mltrain.model.views import ModelView
from mltrain.method.kinds import StepKind


class NonFiniteLoss(RuntimeError):
    """A training loss (or, at a checkpoint, a weight) is NaN or infinite; the message names the step,
    level and phase."""


class Step(NamedTuple):
    """What a row metric sees of one optimizer step (tensors on the device, detached)."""

    loss: torch.Tensor  # the step's loss (the mean over its micro-batches)
    grad_norm: Optional[torch.Tensor]  # the gradients' global norm before clipping (None: train.grad_clip=0)
    view: ModelView  # what the step trained
    x: torch.Tensor  # the batch's input tokens (this rank's)
    lr: float
    kind: str


# Per-row metrics, by the key a train row gives them: each is called once per applied step, and the row
# carries the mean over its steps. Return numbers or device scalars (never a host read: the step has none).
ROW_METRICS: dict[str, Callable[[Step], Any]] = {
    "blocks": lambda step: step.view.n_blocks,  # blocks run per step (a sub-path method runs fewer some steps)
}


def row_metric(name: str) -> Callable[[Callable[[Step], Any]], Callable[[Step], Any]]:
    """Register a function of the step as the row metric `name` (a key every train row then has)."""
    def register(fn: Callable[[Step], Any]) -> Callable[[Step], Any]:
        ROW_METRICS[name] = fn
        return fn

    return register


class PendingRow:
    """One step kind's steps since its last train row. Losses stay on the device (no host sync per
    step) as a list of detached scalars, summed once per row; past COLLAPSE entries they are folded
    into one, so a long log interval holds no more than that (the first non-finite step among them is
    kept as a device index, read only when a non-finite row is named). `t_start` is the run's training
    time (Clock.train_time) when the row's first step began: tokens/s leaves out evaluation,
    diagnostics and checkpoints. Under train.on_nonfinite=skip decided on the device, `applied` holds
    each step's 0/1 flag (folded alike); `compiled`: a step of the row compiled a graph; `sums`: each row
    metric summed over the steps (numbers on the host, tensors on the device)."""

    COLLAPSE = 256
    __slots__ = ("losses", "folded", "first_bad", "_bad_at", "applied", "steps", "tokens", "sums", "flops",
                 "t_start", "view", "compiled")

    def __init__(self, t_start: float, view: Optional[ModelView] = None):
        self.losses: list[torch.Tensor] = []
        self.folded = 0  # how many steps losses[0] stands for (0: losses[i] is step i)
        self.first_bad: Optional[int] = None  # the first non-finite step, once known on the host
        self._bad_at: Optional[torch.Tensor] = None  # the same on the device, found at a fold (-1: none)
        self.applied: Optional[list[torch.Tensor]] = None  # per step 1.0/0.0 (skip decided on the device)
        self.steps, self.tokens, self.t_start, self.view = 0, 0, t_start, view
        self.sums: dict[str, Any] = {}  # the row metrics, summed over the steps
        self.flops = 0.0  # training FLOPs, summed over the steps
        self.compiled = False

    def add(self, loss: torch.Tensor, tokens: int, view: Optional[ModelView], flops: float = 0.0,
            applied: Optional[torch.Tensor] = None, metrics: Optional[dict] = None) -> None:
        """One step's loss and row metrics; `applied` (a device boolean) when skip was decided on the
        device: a skipped step's loss is kept as 0 and left out of the row's mean."""
        if applied is not None:
            if self.applied is None:  # the steps before (none, in practice) applied
                ones = [torch.ones((), device=loss.device)] * len(self.losses)
                self.applied = [torch.full((), float(self.folded), device=loss.device), *ones[1:]] if self.folded else ones
            self.applied.append(applied.to(torch.float32))
            loss = torch.where(applied, loss, torch.zeros_like(loss))
        elif self.applied is not None:
            self.applied.append(torch.ones((), device=loss.device))
        self.losses.append(loss)
        self.steps += 1
        self.tokens += tokens
        for name, value in (metrics or {}).items():
            self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.flops += flops
        self.view = view
        if len(self.losses) >= self.COLLAPSE:
            self._fold()

    def _fold(self) -> None:
        """Sum the losses (and applied flags) so far into one entry, keeping the first non-finite step's
        index on the device: no host sync."""
        stacked = torch.stack(self.losses)
        ok = torch.isfinite(stacked)
        i = torch.argmin(ok.to(torch.uint8))  # the first non-finite entry (0 when there is none)
        at = (i + max(self.folded - 1, 0)).clamp(min=0) if self.folded else i
        found = torch.where(ok.all(), torch.full_like(at, -1), at)
        self._bad_at = found if self._bad_at is None else torch.where(self._bad_at >= 0, self._bad_at, found)
        self.losses = [stacked.sum()]
        if self.applied is not None:
            self.applied = [torch.stack(self.applied).sum()]
        self.folded = self.steps

    def mean_loss(self) -> torch.Tensor:
        """The mean loss of the row's applied steps (a device scalar)."""
        total = torch.stack(self.losses).sum()
        if self.applied is None:
            return total / self.steps
        return total / torch.stack(self.applied).sum().clamp(min=1.0)

    def metric_means(self) -> dict[str, Any]:
        """Each row metric's mean over the row's steps (device scalars stay on the device)."""
        return {name: total / self.steps for name, total in self.sums.items()}

    def applied_flags(self) -> Optional[torch.Tensor]:
        """The applied flags since the last fold, the folded count first (None: every step applied)."""
        return None if self.applied is None else torch.stack(self.applied)

    def _scan(self) -> Optional[int]:
        ok = torch.isfinite(torch.stack(self.losses))
        if bool(ok.all()):
            return None
        i = int((~ok).nonzero()[0, 0])
        return i if not self.folded else max(self.folded - 1 + i, 0)

    def first_nonfinite(self) -> Optional[int]:
        """Which of this row's steps (0-based) first had a non-finite loss, or None. A host sync."""
        if self.first_bad is None and self._bad_at is not None:
            bad = int(self._bad_at)
            self.first_bad, self._bad_at = (bad if bad >= 0 else None), None
        if self.first_bad is not None or not self.losses:
            return self.first_bad
        return self._scan()

    def state_dict(self) -> dict:
        out = {"losses": torch.stack(self.losses).clone() if self.losses else torch.zeros(0),
               "folded": self.folded, "first_bad": self.first_nonfinite() if self.folded else self.first_bad,
               "steps": self.steps, "tokens": self.tokens, "flops": self.flops,
               "sums": {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in self.sums.items()}}
        if self.applied is not None:
            out["applied"] = torch.stack(self.applied).clone()
        return out

    @classmethod
    def from_state(cls, state: dict, t_start: float, device: torch.device) -> "PendingRow":
        p = cls(t_start)
        p.losses = list(state["losses"].to(device).unbind())
        p.folded, p.first_bad = int(state["folded"]), state["first_bad"]
        p.steps, p.tokens = int(state["steps"]), int(state["tokens"])
        p.flops = float(state.get("flops", 0.0))
        sums = state.get("sums", {"blocks": state["blocks"]} if "blocks" in state else {})  # older checkpoints
        p.sums = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in sums.items()}
        if "applied" in state:
            p.applied = list(state["applied"].to(device).unbind())
        return p


def step_name(state: Any, view: Optional[ModelView], kind: str, bad_step: int, now: int, step_in_phase: int) -> str:
    """Names optimizer step `bad_step` of the current row's steps (`now` is the latest, step
    `step_in_phase` of its phase, as the runner's position says): its fine step, level and phase (no
    level where the row names no view). A row's steps are all of one kind and, but for fine ones, of
    one phase."""
    back = now - bad_step
    where = f"{kind} phase" if view is None else f"level {view.level}, {kind} phase"
    if view is not None and view.path:
        where += f" of {view.name}"
    if kind == StepKind.fine:
        return f"fine step {state.fine_steps - back} ({where})"
    return f"{kind} step {step_in_phase - back} of the phase after fine step {state.fine_steps} ({where})"


def nonfinite_error(state: Any, kind: str, pending: PendingRow, step_in_phase: int) -> NonFiniteLoss:
    """The error naming the first non-finite step of `pending` (this rank's; under data parallel a
    rank whose own losses are finite names the row's last step); `step_in_phase`: the latest step's."""
    now = state.optimizer_steps
    first = pending.first_nonfinite()
    bad = now - pending.steps + (first if first is not None else pending.steps - 1) + 1
    where = step_name(state, pending.view, kind, bad, now, step_in_phase) if pending.view is not None else f"a {kind} step"
    return NonFiniteLoss(f"non-finite training loss at {where}")


class SteadyRate:
    """Training FLOPs and time of the train rows measured without a compile in them, per level: the
    steady-state rate a summary's MFU is taken from."""

    def __init__(self) -> None:
        self.flops: dict[int, float] = {}
        self.seconds: dict[int, float] = {}

    def add(self, level: int, flops: float, seconds: float) -> None:
        self.flops[level] = self.flops.get(level, 0.0) + flops
        self.seconds[level] = self.seconds.get(level, 0.0) + seconds

    def mfu(self, peak: Optional[float]) -> dict[str, float]:
        """{level: FLOPs per second / peak} (levels as strings, as JSON keeps them); empty without a peak."""
        if not peak:
            return {}
        return {str(level): self.flops[level] / self.seconds[level] / peak
                for level in sorted(self.flops) if self.seconds[level] > 0}
