"""`Choice`: the base of every config value that comes from a fixed set (optimizer, schedule, dtype, …).

The schema (mltrain/config.py) types such keys with a `Choice` subclass, so OmegaConf refuses any other
value while Hydra composes the config and lists the valid ones:
`optim.name=lion` -> "Invalid value 'lion', expected one of [sgd, adamw]". A member compares equal to its
plain string and prints as it (`f"{OptimName.sgd}" == "sgd"`), so logs, run names and JSON stay plain.
Imports nothing: the model, data and config layers all use it.
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
