"""This process's place among the ranks of one training job, read from the launcher's environment
(torchrun's RANK, LOCAL_RANK, WORLD_SIZE or SLURM's tasks), and the variable that carries the job's one
start time to every rank. No torch: the CLI reads where it stands before Hydra composes the config, and a
config refused there never loads the training stack. Joining the ranks is training/distributed.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from mltrain.core.errors import ConfigError

# A run's start time (seconds since the epoch), set by prepare_launch so that every rank of one
# data-parallel job names the same default run dir (mltrain/config.py start_time reads it).
START_TIME_ENV = "MLTRAIN_START_TIME"


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of one training job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _count(env: Mapping[str, str], name: str, default: str = "0") -> int:
    value = env.get(name, default) or default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} in the environment is not a whole number (it should be set by "
                          "torchrun or SLURM; unset it to train in one process)") from None


def world_from_env(env: Mapping[str, str] = os.environ) -> World:
    """The launcher's ranks: torchrun's variables first (also `srun torchrun ...`), then SLURM's.
    ConfigError naming the one variable that cannot be what it says (not a whole number, a world size
    below 1, a rank or local rank outside [0, world size))."""
    if "RANK" in env and "WORLD_SIZE" in env:
        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    elif _count(env, "SLURM_NTASKS", "1") > 1 and "SLURM_PROCID" in env:
        names = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")
    else:
        return World()
    rank, local, size = (_count(env, name) for name in names)
    for name, value, fits, bound in ((names[2], size, size >= 1, ">= 1"), (names[0], rank, 0 <= rank < size, ""),
                                     (names[1], local, 0 <= local < size, "")):
        if not fits:
            should = bound or f"in [0, {names[2]}={size})"
            raise ConfigError(f"{name}={value} in the environment cannot be this process's place in the job (it must "
                              f"be {should}; torchrun or SLURM set it); unset {', '.join(names)} to train in one process")
    return World(rank, local, size)
