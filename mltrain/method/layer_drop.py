"""Progressive layer dropping (Zhang & He, NeurIPS 2020): every step skips blocks at random, with a keep
probability that starts at 1, decays over training to a floor, and is lower for deeper blocks.

    θ(t)   = (1 − θ̄)·exp(−γ·t) + θ̄                 the global keep ratio at fine step t
    p_l(t) = 1 − (l / L)·(1 − θ(t)),  l = 1 … L      block l's keep probability (depth profile `linear`)

Each block is kept independently with probability p_l(t); a kept block's residual is scaled by
1 / p_l(t) (`rescale`, the authors' released BERT code: x + F(x)/p), so its expected contribution
equals the full model's, and held-out loss is measured on the whole model, unscaled. The scaling here
is of the block's residual as one Euler step, x + F(x)/p; the authors' code scales attention and MLP
branches separately, so its MLP reads x + a/p where ours reads x + a (the same at first order).
"""

from __future__ import annotations

import math
from itertools import compress
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from mltrain.core.choice import Choice
from mltrain.core.errors import ConfigError
from mltrain.method.paths import PathPolicy, Stage, SubPath, step_uniforms
from mltrain.method.registry import register_method
from mltrain.method.rivals import Rival
from mltrain.method.settings import RunSettings

STREAM = 1  # keeps layer dropping's draws apart from other methods' (paths.step_uniforms)


class DropProfile(Choice):
    linear = "linear"  # p_l = 1 − (l/L)(1 − θ(t)): deeper blocks are dropped more (the paper)
    uniform = "uniform"  # p_l = θ(t) for every block


@dataclass
class LayerDropConfig:
    """The `layer_drop` section: block l of L is kept with probability 1 − (l/L)(1 − θ(t)),
    θ(t) = (1 − theta_bar)·exp(−gamma·t) + theta_bar."""

    theta_bar: float = 0.5  # θ̄: the floor the global keep ratio decays to, in (0, 1]
    gamma: float = 0.001  # γ: decay rate per fine step, >= 0
    profile: DropProfile = DropProfile.linear
    rescale: bool = True  # scale a kept block's residual by 1/p


class LayerDropRun(RunSettings, Protocol):
    """The run's settings as a layer-dropping run reads them: the shared sections and the layer_drop one."""

    @property
    def layer_drop(self) -> LayerDropConfig: ...


def theta(step: int, theta_bar: float, gamma: float) -> float:
    """θ(t) = (1 − θ̄)·exp(−γ·t) + θ̄: 1 at t = 0, decaying to the floor θ̄."""
    return (1.0 - theta_bar) * math.exp(-gamma * step) + theta_bar


def keep_probabilities(step: int, n_layer: int, theta_bar: float, gamma: float,
                       profile: DropProfile | str = DropProfile.linear) -> np.ndarray:
    """p_l(t) for blocks l = 1 … n_layer (index 0 is block 1, the one nearest the embeddings)."""
    return keep_table([step], n_layer, theta_bar, gamma, profile)[0]


def keep_table(steps: Sequence[int], n_layer: int, theta_bar: float, gamma: float,
               profile: DropProfile | str = DropProfile.linear) -> np.ndarray:
    """`keep_probabilities` of each of `steps`, one row each (the same numbers, computed together)."""
    th = np.array([theta(step, theta_bar, gamma) for step in steps])[:, None]
    if DropProfile(profile) == DropProfile.uniform:
        return np.repeat(th, n_layer, axis=1)
    return 1.0 - np.arange(1, n_layer + 1) / n_layer * (1.0 - th)


@dataclass(frozen=True)
class LayerDrop(PathPolicy):
    n_layer: int
    theta_bar: float
    gamma: float
    profile: DropProfile
    rescale: bool
    seed: int

    def path(self, step: int) -> SubPath:
        return self.paths(step, 1)[0]

    def paths(self, start: int, count: int) -> list[SubPath]:
        """Block l runs at step t when its uniform of the step (paths.step_uniforms) is below p_l(t)."""
        keep = keep_table(range(start, start + count), self.n_layer, self.theta_bar, self.gamma, self.profile)
        kept = step_uniforms(self.seed, STREAM, start, count, self.n_layer) < keep
        positions = range(self.n_layer)
        if not self.rescale:
            return [SubPath(tuple(compress(positions, row))) for row in kept.tolist()]
        return [SubPath(tuple(compress(positions, row)), tuple(compress(scales, row)))
                for scales, row in zip((1.0 / keep).tolist(), kept.tolist())]


@register_method
class LayerDropping(Rival):
    """Every step skips blocks at random (progressive layer dropping)."""

    name = "layer_drop"
    Config = LayerDropConfig  # the `layer_drop` section
    cfg: LayerDropRun

    def stages(self, total_steps: int) -> list[Stage]:
        c = self.cfg.layer_drop
        policy = LayerDrop(self.cfg.model.n_layer, float(c.theta_bar), float(c.gamma), DropProfile(c.profile),
                           bool(c.rescale), self.cfg.seed)
        return [Stage(total_steps, policy)]

    def check_keys(self, total_steps: int) -> None:
        c = self.cfg.layer_drop
        if not 0.0 < c.theta_bar <= 1.0:
            raise ConfigError(f"layer_drop.theta_bar={c.theta_bar} must be in (0, 1] (the floor of the keep "
                              "probability)")
        if not c.gamma >= 0.0:
            raise ConfigError(f"layer_drop.gamma={c.gamma} must be >= 0 (the decay rate of the keep probability "
                              "per step)")
