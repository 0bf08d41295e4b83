"""`RunConfig`: the typed run config as the training layer reads it. mltrain/config.py's `Config`
(composed by Hydra above this layer, turned into a dataclass once by the CLI) has these sections; the
training code names this Protocol rather than importing `Config` upward. It extends the method layer's
`RunSettings` (mltrain/method/settings.py), since the runner hands the whole config to the depth method,
which reads its own sections; the training code reads only the sections named here."""

from __future__ import annotations

from typing import Protocol

from mltrain.data.config import DataConfig
from mltrain.method.settings import RunSettings
from mltrain.model.settings import GPTConfig
from mltrain.runs.tracking import LoggerConfig
from mltrain.optim_settings import OptimConfig, ScheduleConfig
from mltrain.training.settings import TrainConfig


class RunConfig(RunSettings, Protocol):
    seed: int
    model: GPTConfig
    data: DataConfig
    train: TrainConfig
    optim: OptimConfig
    schedule: ScheduleConfig
    logger: LoggerConfig
