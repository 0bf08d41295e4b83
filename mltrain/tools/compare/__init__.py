"""`mltrain-compare`: does a training method reach the same held-out loss as *tuned* single-level
training with less compute? Reads run directories (or W&B runs); never the training code's internals.

    mltrain-compare multirun/2025-01-01/12-00-00            # a sweep folder (searched recursively)
    mltrain-compare multirun/ --select-seeds 0 --tune optim.momentum --out report/
    mltrain-compare --wandb my-team/mltrain --group 'coarsening=evenodd'

    from mltrain.tools.compare import compare_dirs          # the same report as a dict
    report = compare_dirs(["multirun/"], out=None, select_seeds=[0], tune=(), plot=False)

The verdict: runs are grouped into *arms* (a method with its tuned keys left free, `arms`); each arm
keeps its best setting on the selection seeds; the single-level runs form one tuned frontier
(`frontier`); a power law fitted to it (`powerlaw`) turns each arm's final loss into a compute
multiplier with a bootstrap interval over the evaluation seeds (`verdict`), beside the saving read on
the frontier's points and on a wall-clock axis.

Modules, one way down: `cli` (arguments) → `api` (the pipeline, `compare_dirs`) → `verdict`,
`analysis` (per-configuration tables) → `frontier`, `arms`, `powerlaw`, `statistics` (arrays) and
`loading` (runs, their status and provenance); `names` makes readable names; `report` renders
markdown and `plot` the figure, both from the report dict.

Trust: only runs that finished with finite losses count. A run without summary.json, one whose summary
says interrupted or diverged, one with a non-finite loss, one whose files contradict themselves, and
one whose data, tokenizer, held-out set, FLOP convention or model differs from the reference's are
listed in the report with the reason and left out of every number.
"""

from mltrain.tools.compare.api import compare_dirs
from mltrain.tools.compare.cli import main, run_compare
from mltrain.tools.compare.loading import CompareError
from mltrain.tools.compare.statistics import first_reach, interval, moving_average

__all__ = ["main", "run_compare", "compare_dirs", "CompareError", "first_reach", "interval", "moving_average"]
