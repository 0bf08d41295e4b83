"""The rival depth methods, chosen with `depth_method=` (the `stacking`, `layer_drop` and `raptr`
experiment presets set it): which one a config names, its stages, and its checks.

Each method trains the fine model's own blocks through sub-paths (mltrain/method/paths.py), with the
fine optimizer, the fine LR schedule and the fine data stream, so each of its steps is a fine step
(paired by seed with single-level runs) that costs what the blocks it ran cost. A method is a module
with `stages(cfg, total_steps)` and `check_config(cfg, total_steps)`; the plan turns its stages into
train phases (and grow phases, for stacking).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

from mltrain.choice import Choice
from mltrain.errors import ConfigError
from mltrain.method import layer_drop, raptr, stacking
from mltrain.method.coarsening import scheme_class
from mltrain.method.kinds import RunKind
from mltrain.method.paths import Stage


class DepthMethod(Choice):
    none = "none"  # single-level or multilevel training (coarsening=)
    stacking = "stacking"  # progressive stacking (mltrain/method/stacking.py)
    layer_drop = "layer_drop"  # progressive layer dropping (mltrain/method/layer_drop.py)
    raptr = "raptr"  # random path training (mltrain/method/raptr.py)


_METHODS: dict[DepthMethod, ModuleType] = {
    DepthMethod.stacking: stacking,
    DepthMethod.layer_drop: layer_drop,
    DepthMethod.raptr: raptr,
}


def rival_kind(cfg: Any) -> Optional[RunKind]:
    """The run kind of the rival method `cfg` names, or None (single-level or multilevel training)."""
    method = DepthMethod(cfg.depth_method)
    return None if method == DepthMethod.none else RunKind(method.value)


def stages(cfg: Any, total_steps: int) -> list[Stage]:
    return _METHODS[DepthMethod(cfg.depth_method)].stages(cfg, total_steps)


def check_config(cfg: Any, total_steps: int) -> None:
    """ConfigError (one line) unless the rival method `cfg` names can run `total_steps` fine steps."""
    method = DepthMethod(cfg.depth_method)
    if method == DepthMethod.none:
        return
    if scheme_class(cfg.coarsening.scheme).coarsens:
        raise ConfigError(f"depth_method={method} trains sub-paths of the fine model itself and cannot be combined "
                          f"with coarsening={cfg.coarsening.name}: use coarsening=none")
    _METHODS[method].check_config(cfg, total_steps)
