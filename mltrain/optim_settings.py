"""The settings of an optimizer and of an LR schedule: the `optim` and `schedule` sections of the run
config, and `CoarseOptimConfig`, the settings of a phase's own optimizer that a method's section embeds
(`multilevel.coarse_optim`, `multilevel.coarse_schedule`).

They are plain dataclasses and fixed-choice names, with no torch: the method layer describes a phase's
own optimizer with them, and training/optim.py builds the optimizers and schedules from them. That is
why they are in the core layer, below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from mltrain.core.choice import Choice


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
