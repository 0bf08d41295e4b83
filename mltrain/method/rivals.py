"""The rival depth methods, chosen with `depth_method=` (the `stacking`, `layer_drop` and `raptr`
experiment presets set it): the base class of each (`Rival`), which turns its stages into a plan.

Each method trains the fine model's own blocks through sub-paths (mltrain/method/paths.py), with the
fine optimizer, the fine LR schedule and the fine data stream, so each of its steps is a fine step
(paired by seed with single-level runs) that costs what the blocks it ran cost. A method is a `Rival`
registered with `@register_method` (stacking.py, layer_drop.py, raptr.py): its `stages` become train
phases (after a grow phase, for stacking), its `check_keys` check its own section.
"""

from __future__ import annotations

from typing import Any

from mltrain.core.errors import ConfigError
from mltrain.method.coarsening import scheme_class
from mltrain.method.paths import Stage
from mltrain.method.plan import Grow, Phase, TrainPhase
from mltrain.method.registry import DepthMethod


class Rival(DepthMethod):
    """A depth method made of stages over sub-paths of the fine model (chosen with depth_method=<name>)."""

    def stages(self, total_steps: int) -> list[Stage]:
        raise NotImplementedError

    def check_keys(self, total_steps: int) -> None:
        """ConfigError unless the method's own section can run `total_steps` fine steps."""

    def check_config(self, total_steps: int) -> None:
        cfg = self.cfg
        if scheme_class(cfg.coarsening.scheme).coarsens:
            raise ConfigError(f"depth_method={self.name} trains sub-paths of the fine model itself and cannot be "
                              f"combined with coarsening={cfg.coarsening.name}: use coarsening=none")
        self.check_keys(total_steps)

    def plan(self, total_steps: int) -> list[Phase]:
        return stage_phases(self.stages(total_steps))

    def summary_fields(self, state: Any, fine_step_flops: float) -> dict[str, Any]:
        """Its FLOPs in fine steps (each step costs what the blocks it ran cost)."""
        return {**super().summary_fields(state, fine_step_flops), "fine_equivalent_steps": state.flops / fine_step_flops}


def stage_phases(stages: list[Stage]) -> list[Phase]:
    """A rival method's stages as fine train phases, each after its growth (if any)."""
    plan: list[Phase] = []
    for stage in stages:
        if stage.growth is not None:
            plan.append(Grow(growth=stage.growth))
        plan.append(TrainPhase(steps=stage.steps, paths=stage.paths))
    return plan
