"""`mltrain-compare`: does a training method reach the same held-out loss as *tuned* single-level
training with less compute? Reads run directories (or W&B runs); never the training code's internals.

    mltrain-compare multirun/2025-01-01/12-00-00            # a sweep folder (searched recursively)
    mltrain-compare multirun/ --select-seeds 0 --tune optim.momentum --out report/
    mltrain-compare --wandb my-team/mltrain --group 'coarsening=evenodd'

    from mltrain.tools.compare import compare_report        # the report as typed results
    report = compare_report(["multirun/"], out=None, select_seeds=[0], tune=(), plot=False)
    report.arms[0].multiplier.M                             # compare_dirs: report.to_json(), comparison.json's dict

This package's names are its public API (what the study and scripts use): the command, the pipeline, the
report's types a consumer reads (`Report`, `Arm`, `Multiplier`, `FitError`; the rest of the report's
parts are reached through them); its modules are its own. The results are `Jsonable` dataclasses
(mltrain/core/jsonable.py, the one dataclass <-> JSON conversion the study's ladder uses too).

The verdict: runs are grouped into *arms* (a method with its tuned keys left free, `arms`); each arm
keeps its best setting on the selection seeds; the single-level runs form one tuned frontier
(`frontier`); a power law fitted to it (`powerlaw`) turns each arm's final loss into a compute
multiplier with a bootstrap interval over the evaluation seeds (`verdict`), beside the saving read on
the frontier's points and on a wall-clock axis.

Modules, one way down: `cli` (arguments) → `api` (the pipeline, `compare_dirs`) → `verdict`,
`analysis` (per-configuration tables) → `frontier`, `arms`, `powerlaw`, `statistics` (arrays, and the
interval over seeds the report holds) and `loading` (runs, their status and provenance); `names` makes
readable names; `results` holds the typed results the pipeline builds (the report, its arms and
frontier) and writes as JSON (`tables`: the per-configuration tables among them);
`report` renders comparison.md and `plot` the figure, both from those results.

Trust: only runs that finished with finite losses count. A run without summary.json, one whose summary
says interrupted or diverged, one with a non-finite loss, one whose files contradict themselves, and
one whose data, tokenizer, held-out set, FLOP convention or model differs from the reference's are
listed in the report with the reason and left out of every number.
"""

from mltrain.tools.compare.api import compare_dirs, compare_report
from mltrain.tools.compare.arms import TUNED_KEYS
from mltrain.tools.compare.cells import markdown_safe
from mltrain.tools.compare.cli import main
from mltrain.tools.compare.loading import CompareError
from mltrain.tools.compare.results import Arm, FitError, Multiplier, Report
from mltrain.tools.compare.verdict import MIN_SEEDS_FOR_INTERVAL

__all__ = ["main", "compare_dirs", "compare_report", "CompareError", "Report", "Arm", "Multiplier", "FitError",
           "markdown_safe", "TUNED_KEYS", "MIN_SEEDS_FOR_INTERVAL"]
