"""Single-level training: the baseline every other depth method is measured against."""

from __future__ import annotations

from mltrain.method.coarsening import scheme_class
from mltrain.method.plan import Phase, TrainPhase
from mltrain.method.registry import NONE, DepthMethod, register_method
from mltrain.method.settings import RunSettings


@register_method
class Single(DepthMethod):
    """The fine model alone, for the whole run: one train phase (`depth_method=none`, `coarsening=none`)."""

    name = "single"
    by_name = False

    @classmethod
    def chosen(cls, cfg: RunSettings) -> bool:
        return str(cfg.depth_method) == NONE and not scheme_class(cfg.coarsening.scheme).coarsens

    def plan(self, total_steps: int) -> list[Phase]:
        return [TrainPhase(steps=total_steps)]
