"""Optimizers and learning-rate schedules, built from their settings (mltrain/optim_settings.py: the
`optim` and `schedule` sections, and a phase's own optimizer's).

A schedule is a pure function of its position (the step index), so saving the position is enough to
resume it. The fine level's position is the fine step count; a phase with a schedule of its own
restarts at 0 every phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from mltrain.optim_settings import OptimConfig, OptimName, ScheduleName


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: OptimConfig, device: torch.device) -> torch.optim.Optimizer:
    """SGD or AdamW over `params`, as the optimizer section `cfg` says (the fine `optim`, or a phase's own
    resolved settings). Weight decay only on matrices (not norms, biases)."""
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    fused = getattr(cfg, "fused", None)  # null or absent: fused kernels where the device supports them
    if fused is None:
        fused = device.type in FUSED_DEVICES
    return _OPTIMIZERS[OptimName(cfg.name)](groups, cfg, fused or None)


# Where `optim.fused=null` picks torch's fused SGD/AdamW kernels. On the CPU (torch >= 2.4) they replace a
# Python loop over the parameters (docs/results-bench.md has the figures); SGD's result is bit-identical,
# AdamW's equal up to float rounding. Both skip a step themselves when told to (train.on_nonfinite=skip).
FUSED_DEVICES = ("cuda", "cpu")


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    return bool(optimizer.param_groups[0].get("fused"))


# How each OptimName builds its torch optimizer from the param groups and the config.
_OPTIMIZERS = {
    OptimName.sgd: lambda groups, cfg, fused: torch.optim.SGD(
        groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov, fused=fused
    ),
    OptimName.adamw: lambda groups, cfg, fused: torch.optim.AdamW(
        groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=fused
    ),
}


def lr_at(position: int, schedule: Any, peak_lr: float, total_steps: int) -> float:
    """LR for step `position` (0-based) of a schedule that spans `total_steps` steps.

    Linear warm-up (position+1)/warmup · peak — so the paper's fine LR at step 35 of a 715-step
    warm-up is ≈6e-5, some 20 times below the paper's constant 1.2e-3 of its other phases — then constant or cosine
    from peak down to min_lr at total_steps.
    """
    warmup = schedule.warmup_steps
    if position < warmup:
        return peak_lr * (position + 1) / warmup
    if schedule.name == ScheduleName.constant:
        return peak_lr
    progress = min(1.0, (position - warmup) / max(1, total_steps - warmup))
    return schedule.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak_lr - schedule.min_lr)


@dataclass(frozen=True)
class LRSchedule:
    """`lr_at` with its configuration read once: calling it is plain arithmetic. (Reading a key of an
    OmegaConf config costs ~20 µs; a handful per step was ~5% of a small model's step time.)"""

    name: str
    warmup_steps: int
    min_lr: float
    peak_lr: float
    total_steps: int

    @classmethod
    def from_config(cls, schedule: Any, peak_lr: float, total_steps: int) -> "LRSchedule":
        return cls(str(schedule.name), int(schedule.warmup_steps), float(schedule.min_lr), float(peak_lr),
                   int(total_steps))

    def __call__(self, position: int) -> float:
        return lr_at(position, self, self.peak_lr, self.total_steps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
