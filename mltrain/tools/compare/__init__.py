"""`mltrain-compare`: is multilevel training cheaper than single-level training, in FLOPs, for the same
held-out loss? Reads run directories (or W&B runs); never the training code's internals.

    mltrain-compare multirun/2025-01-01/12-00-00            # a sweep folder (searched recursively)
    mltrain-compare runA runB runC --smooth 20 --logx --out report/
    mltrain-compare --wandb my-team/mltrain --group 'coarsening=evenodd'

Modules, one way down: `cli` (arguments, files) → `analysis` (the report's numbers) → `statistics`
(curves, intervals, the frontier, on plain arrays) and `loading` (runs, their status and provenance);
`report` renders markdown and `plot` the figure, both from the report dict.

Trust: only runs that finished with finite losses count. A run without summary.json, one whose summary
says interrupted or diverged, one with a non-finite loss, and one whose data, tokenizer, held-out set or
FLOP convention differs from the baseline's are listed in the report with the reason and left out of
every number.
"""

from mltrain.tools.compare.cli import main, run_compare
from mltrain.tools.compare.loading import CompareError
from mltrain.tools.compare.statistics import first_reach, interval, moving_average

__all__ = ["main", "run_compare", "CompareError", "first_reach", "interval", "moving_average"]
