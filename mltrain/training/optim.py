"""Optimizers and learning-rate schedules, and the `optim` and `schedule` sections of the run config that
configure them (and `CoarseOptimConfig`, the settings of a phase's own optimizer, which a method's section
embeds).

A schedule is a pure function of its position (the step index), so saving the position is enough to
resume it. The fine level's position is the fine step count; a coarse phase's position restarts at 0
every phase (the paper's coarse schedule is constant, where the position does not matter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional

import torch

from mltrain.choice import Choice


class OptimName(Choice):
    sgd = "sgd"
    adamw = "adamw"


class ScheduleName(Choice):
    cosine = "cosine"  # linear warm-up, then cosine from the peak LR to min_lr at the end
    constant = "constant"  # linear warm-up, then the peak LR


@dataclass
class OptimConfig:
    name: OptimName = OptimName.sgd
    # peak learning rate. Every scale preset sets its own (conf/scale/*.yaml); the schema's is PyTorch's default.
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9  # sgd only
    nesterov: bool = False  # sgd only
    betas: List[float] = field(default_factory=lambda: [0.9, 0.95])  # adamw only
    eps: float = 1e-8  # adamw only
    fused: Optional[bool] = None  # None: fused kernels where the device supports them


@dataclass
class CoarseOptimConfig:
    """The coarse levels' optimizer. Every field left null inherits the fine optimizer's value."""

    name: Optional[OptimName] = None
    lr: Optional[float] = None
    weight_decay: Optional[float] = None
    momentum: Optional[float] = None
    nesterov: Optional[bool] = None
    betas: Optional[List[float]] = None
    eps: Optional[float] = None


@dataclass
class ScheduleConfig:
    name: ScheduleName = ScheduleName.cosine
    warmup_steps: int = 0  # linear warm-up from 0 to optim.lr
    min_lr: float = 0.0  # cosine floor, reached at train.max_steps


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: OptimConfig, device: torch.device) -> torch.optim.Optimizer:
    """SGD or AdamW over `params`, as the optimizer section `cfg` says (the fine `optim`, or a phase's own
    resolved settings). Weight decay only on matrices (not norms, biases)."""
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    fused = cfg.fused if getattr(cfg, "fused", None) is not None else device.type == "cuda"
    return _OPTIMIZERS[OptimName(cfg.name)](groups, cfg, fused or None)


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
    warm-up is ≈6e-5, some 20 times below the coarse phase's constant 1.2e-3 — then constant or cosine
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
