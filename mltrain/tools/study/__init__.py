"""`mltrain-study`: the whole fair protocol in one command, at several model sizes.

A study (conf/study/<name>.yaml) names arms (method presets with tuned keys and grids), selection and
evaluation seeds, and a ladder of scales. Per scale it tunes every arm equally on the selection seeds,
evaluates the chosen settings (and the tuned single-level frontier) on the evaluation seeds, asks
mltrain-compare for the verdict, and finally reports whether each arm's compute multiplier grows,
stays flat or shrinks with model size. Every run is an ordinary `mltrain -m` sweep job, launched by
whichever Hydra launcher the study names.

Modules, one way down: `cli` (command line) → `stages` (the stages, resumption) → `launch` (one sweep
through Hydra), `records` (what travels in git, the environment a continuation must equal), `window`
(--for / --until), `progress` (run lines, status), `ladder` (the report, the trend) → `compose` (every
run's config checked up front) → `plan` (sweeps, runs, folders) → `schema` (the study's config).
"""

from mltrain.tools.study.cli import main

__all__ = ["main"]
