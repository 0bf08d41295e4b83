"""The ladder axes: what a study's rungs may vary (`ladder_axis`), the x-axis of its ladder report.

An axis is one `LadderAxis` in the registry `AXES`, and everything the study tool knows of it is there:
its name, the keys its rungs may set differently, how a rung's value is read from the rung's size
(compose.ScaleSize, itself read from the rung's composed config, so no value is typed twice) and how
the report names it. The schema's check, the rungs' check and the ladder report read the registry and
know no axis by name beyond it. A new axis is one registration, from any module:

    @ladder_axis(name="compute", keys=("model",), words="training compute", symbol="compute",
                 title="training compute C = 6 N D (FLOPs)", unit="FLOPs")
    def compute(size):
        return 6.0 * size.n_params * size.max_steps * size.tokens_per_step

Torch-free, and below every other module of the study tool: it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

# Beyond an axis's own keys, what follows from any axis and so may differ between rungs: the steps
# (through the token budget), the warm-up and the coarse steps, which the yaml sizes per rung.
FOLLOWS_FROM_AXIS = ("train.max_steps", "schedule.warmup_steps", "multilevel.coarse_steps")


class RungSize(Protocol):
    """What an axis reads a rung's value from (compose.ScaleSize)."""

    n_params: int
    max_steps: int
    tokens_per_step: int
    n_layer: int
    n_embd: int

    @property
    def tokens_per_param(self) -> float: ...


@dataclass(frozen=True)
class LadderAxis:
    """One axis a ladder's rungs may vary."""

    name: str  # the study's ladder_axis value
    # The keys its rungs may set differently (a key matches itself and the keys below it); () for an
    # axis that only the token budget moves.
    keys: tuple[str, ...]
    value: Callable[[RungSize], float]  # a rung's value on the axis
    words: str  # in a sentence: "a depth ladder", "the same depth (8)"
    symbol: str  # in the trend's "log M against log <symbol>" and the plot's "multiplier vs <symbol>"
    title: str  # the plot's axis label and ladder.json's axis_label
    unit: str  # after the rungs' span: "(4 to 16 blocks)"


AXES: dict[str, LadderAxis] = {}


def register_axis(axis: LadderAxis) -> LadderAxis:
    """Make `axis` available as `ladder_axis=<axis.name>`."""
    AXES[axis.name] = axis
    return axis


def ladder_axis(name: str, keys: tuple[str, ...], words: str, symbol: str, title: str,
                unit: str) -> Callable[[Callable[[RungSize], float]], Callable[[RungSize], float]]:
    """Decorator: register the function of a rung's size it decorates as the value of the axis `name`."""
    def register(value: Callable[[RungSize], float]) -> Callable[[RungSize], float]:
        register_axis(LadderAxis(name, tuple(keys), value, words, symbol, title, unit))
        return value

    return register


@ladder_axis(name="params", keys=("model",), words="parameters", symbol="N", title="model parameters N",
             unit="parameters")
def params(size: RungSize) -> float:
    """The model's size, whatever changes it."""
    return float(size.n_params)


@ladder_axis(name="depth", keys=("model.n_layer",), words="depth", symbol="depth",
             title="depth: blocks (model.n_layer)", unit="blocks")
def depth(size: RungSize) -> float:
    return float(size.n_layer)


@ladder_axis(name="width", keys=("model.n_embd", "model.n_head"), words="width", symbol="width",
             title="width: model.n_embd", unit="wide")
def width(size: RungSize) -> float:
    return float(size.n_embd)


@ladder_axis(name="tokens_per_param", keys=(), words="tokens per parameter", symbol="tokens per parameter",
             title="training tokens per parameter", unit="tokens per parameter")
def tokens_per_param(size: RungSize) -> float:
    """The token budget: train.max_steps x batch x context per parameter."""
    return float(size.tokens_per_param)
