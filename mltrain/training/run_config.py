"""`RunConfig`: the typed run config as the training layer reads it. mltrain/config.py's `Config`
(composed by Hydra above this layer, turned into a dataclass once by the CLI) has these sections; the
training code names this Protocol rather than importing `Config` upward. The depth methods' sections
are read by the method (mltrain/method/), which the runner hands the whole config to."""

from __future__ import annotations

from typing import Any, Protocol

from mltrain.data.config import DataConfig
from mltrain.model import GPTConfig
from mltrain.runs.tracking import LoggerConfig
from mltrain.optim_settings import OptimConfig, ScheduleConfig
from mltrain.training.settings import TrainConfig


class RunConfig(Protocol):
    seed: int
    model: GPTConfig
    data: DataConfig
    train: TrainConfig
    optim: OptimConfig
    schedule: ScheduleConfig
    logger: LoggerConfig
    coarsening: Any  # a depth method's section: the method reads it (mltrain/method/)
    multilevel: Any
