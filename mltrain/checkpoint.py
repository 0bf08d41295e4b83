"""Resume state on disk: one file with everything `MultilevelRunner.state_dict()` captures.

The runner's state is exact mid-cycle (plan position, step within the phase, every optimizer, the
samplers' positions, the RNG), so a run stopped anywhere and restored into a runner built from the same
config continues as if never stopped. Written atomically: a preempted save never leaves a half file.
(Wiring to the CLI and SLURM's preemption signal is the next step on the roadmap.)
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from mltrain.atomic import atomic_open
from mltrain.multilevel import MultilevelRunner


def save_checkpoint(path: str | os.PathLike, runner: MultilevelRunner) -> Path:
    with atomic_open(path, "wb") as f:
        torch.save(runner.state_dict(), f)
    return Path(path)


def load_checkpoint(path: str | os.PathLike, runner: MultilevelRunner) -> None:
    state = torch.load(path, map_location=runner.device, weights_only=True)
    runner.load_state_dict(state)
