"""`mltrain-compare`: arguments, the report, its files.

Outputs (in `--out`, default: the common parent of the given paths): `comparison.png`, `comparison.md`
(printed to stdout too) and `comparison.json` (every number). Bad input: one `mltrain-compare: error:`
line on stderr, exit status 1 (argparse's usage errors: 2). What does not stop the report (no
baseline, a selection seed no run has, a fit that does not converge) is one `mltrain-compare: warning:`
line each on stderr, and in the report.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from mltrain.tools.compare.api import compare_runs, load_dirs
from mltrain.tools.compare.arms import TUNED_KEYS
from mltrain.tools.compare.loading import METRICS, CompareError, load_wandb_runs
from mltrain.tools.compare.cells import markdown_safe
from mltrain.tools.compare.report import render_markdown
from mltrain.tools.compare.results import Report

log = logging.getLogger("mltrain.tools.compare")
DPI_RANGE = (10, 1000)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mltrain-compare",
        description="Compare training methods with tuned single-level training in loss vs FLOPs.",
    )
    p.add_argument("paths", nargs="*", help="run directories and/or sweep folders (searched recursively)")
    p.add_argument("--out", help="output folder (default: the common parent of the paths; cwd with --wandb)")
    p.add_argument("--select-seeds", nargs="+", metavar="SEED", help="seeds that choose each arm's best setting; "
                   "the verdict is measured on the other seeds only (default: none, and the report says it is "
                   "optimistic)")
    p.add_argument("--tune", action="append", default=[], metavar="KEY",
                   help=f"another override key each arm is tuned over (repeatable; always: {', '.join(TUNED_KEYS)})")
    p.add_argument("--smooth", type=int, default=10, metavar="N",
                   help="train loss: trailing moving average over the last N fine-level rows (default 10; 1 = raw)")
    p.add_argument("--baseline", metavar="LABEL", help="label of the configuration the per-configuration "
                   "tables compare with (default: the kept single-level setting at its largest train.budget)")
    p.add_argument("--control", metavar="LABEL", help="label of the schedule-control configuration "
                   "(default: matched by label, or the only one)")
    p.add_argument("--data-group", metavar="DATA", help="when the runs differ in data, tokenizer or held-out set: "
                   "compare the ones on this data (its description, tokenizer or held-out fingerprint, as the "
                   "warning names them; default: the largest group, the others named)")
    p.add_argument("--logx", action="store_true", help="log-scale FLOPs axis")
    p.add_argument("--dpi", type=int, default=120, help=f"resolution of comparison.png ({DPI_RANGE[0]}-{DPI_RANGE[1]}, default 120)")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read runs from the W&B API instead of folders")
    p.add_argument("--group", help="--wandb: only runs of this W&B group")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="--wandb: extra API filter, e.g. state=finished or config.seed=1 (repeatable)")
    return p


def _default_out(paths: list[str]) -> Path:
    absolute = [os.path.abspath(p) for p in paths]
    common = Path(os.path.commonpath(absolute)) if len(absolute) > 1 else Path(absolute[0])
    if not common.is_dir():
        common = common.parent
    if (common / METRICS).exists() and len(paths) > 1:
        common = common.parent
    return common


def run_compare(args: argparse.Namespace, argv: Sequence[str]) -> Report:
    if args.smooth < 1:
        raise CompareError(f"--smooth {args.smooth}: must be >= 1")
    if not DPI_RANGE[0] <= args.dpi <= DPI_RANGE[1]:
        raise CompareError(f"--dpi {args.dpi}: must be between {DPI_RANGE[0]} and {DPI_RANGE[1]}")
    for key in args.tune:
        if not key or "=" in key or key.startswith(("-", ".")) or key.endswith("."):
            raise CompareError(f"--tune {key!r}: expected an override key such as optim.momentum")
    if args.wandb:
        if args.paths:
            raise CompareError("give run folders or --wandb, not both")
        runs = load_wandb_runs(args.wandb, args.group, args.filter)
        if not runs:
            raise CompareError(f"no mltrain runs found in W&B project {args.wandb!r}")
        out = Path(args.out) if args.out else Path.cwd()
    else:
        if not args.paths:
            raise CompareError("give run/sweep directories, or --wandb ENTITY/PROJECT")
        runs = load_dirs(args.paths)
        out = Path(args.out) if args.out else _default_out(args.paths)
    for r in runs:
        if not r.usable:
            log.warning("left out of the comparison: %s: %s (%s)", r.source, r.status, r.reason)
    return compare_runs(
        runs, out, select_seeds=args.select_seeds, tune=args.tune, smooth=args.smooth, baseline_label=args.baseline,
        control_label=args.control, logx=args.logx, dpi=args.dpi, data_group=args.data_group,
        command=" ".join(shlex.quote(a) for a in ["mltrain-compare", *argv]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    try:
        report = run_compare(args, argv)
    except CompareError as err:
        print(f"mltrain-compare: error: {err}", file=sys.stderr)
        return 1
    for w in report.warnings:
        print(f"mltrain-compare: warning: {w}", file=sys.stderr)
    print(render_markdown(markdown_safe(report)))
    return 0

