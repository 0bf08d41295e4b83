"""`mltrain-compare`: arguments, loading, the report, its files.

Outputs (in `--out`, default: the common parent of the given paths): `comparison.png`, `comparison.md`
(printed to stdout too) and `comparison.json` (every number). Bad input: one `mltrain-compare: error:`
line on stderr, exit status 1 (argparse's usage errors: 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from mltrain.tools.compare.analysis import build_report, choose_baseline, exclude_mismatched, names
from mltrain.tools.compare.loading import (
    METRICS,
    SUMMARY,
    CompareError,
    find_run_dirs,
    group_runs,
    load_run_dir,
    load_wandb_runs,
)
from mltrain.tools.compare.plot import plot
from mltrain.tools.compare.report import render_markdown
from mltrain.tools.compare.statistics import INTERVAL_METHOD, moving_average
from mltrain.runs.atomic import refuse_links
from mltrain.runs.tracking import write_json_atomic

log = logging.getLogger("mltrain.tools.compare")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mltrain-compare",
        description="Compare multilevel runs with single-level training in loss vs FLOPs.",
    )
    p.add_argument("paths", nargs="*", help="run directories and/or sweep folders (searched recursively)")
    p.add_argument("--out", help="output folder (default: the common parent of the paths; cwd with --wandb)")
    p.add_argument("--smooth", type=int, default=10, metavar="N",
                   help="train loss: trailing moving average over the last N fine-level rows (default 10; 1 = raw)")
    p.add_argument("--baseline", metavar="LABEL", help="label of the reference configuration (default: the "
                   "full-length member of the only single-level family; others of it with another "
                   "train.budget form the budget frontier)")
    p.add_argument("--control", metavar="LABEL", help="label of the schedule-control configuration "
                   "(default: matched by label, or the only one)")
    p.add_argument("--logx", action="store_true", help="log-scale FLOPs axis")
    p.add_argument("--dpi", type=int, default=120, help="resolution of comparison.png (default 120)")
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


def run_compare(args: argparse.Namespace, argv: Sequence[str]) -> str:
    if args.smooth < 1:
        raise CompareError(f"--smooth {args.smooth}: must be >= 1")
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
        dirs = find_run_dirs(args.paths)
        if not dirs:
            raise CompareError(
                f"no run directories (folders with {METRICS}) found under: {', '.join(args.paths)}"
            )
        runs = [load_run_dir(d) for d in dirs]
        out = Path(args.out) if args.out else _default_out(args.paths)
    for r in runs:
        r.smoothed = moving_average(r.train.loss, args.smooth)
    usable = [r for r in runs if r.usable]
    try:
        baseline = choose_baseline(group_runs(usable), args.baseline)
    except CompareError as err:
        left_out = [r for r in runs if not r.usable]
        if left_out:  # say why the runs that would have been the baseline are not there
            why = "; ".join(f"{r.source}: {r.status} ({r.reason})" for r in left_out[:3])
            raise CompareError(f"{err} [left out: {why}{'; ...' if len(left_out) > 3 else ''}]") from None
        raise
    exclude_mismatched(runs, baseline.runs[0])
    configs = group_runs(r for r in runs if r.usable)
    baseline = next(c for c in configs if c.key == baseline.key)
    excluded = [r for r in runs if not r.usable]
    for r in excluded:
        log.warning("left out of the comparison: %s: %s (%s)", r.source, r.status, r.reason)
    report = build_report(configs, baseline, args.control)
    refuse_links(out / f"comparison.{ext}" for ext in ("png", "md", "json"))  # never write through a link
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(shlex.quote(a) for a in ["mltrain-compare", *argv]),
        "smooth": args.smooth,
        "smoothing": f"trailing moving average over the last {args.smooth} level-0 train rows",
        "pairing": "by seed; a seed the reference lacks uses the reference's mean (and is left out of intervals)",
        "interval_method": INTERVAL_METHOD,
        "std": "sample std (ddof=1) over seeds that reached the target; null with fewer than 2",
        "excluded": [{"run": r.source, "label": r.label, "run_kind": r.run_kind, "seed": r.seed,
                      "status": r.status, "reason": r.reason} for r in excluded],
        **report,
        "outputs": {k: str(out / f"comparison.{k}") for k in ("png", "md", "json")},
    }
    plot(configs, baseline, report, out / "comparison.png", args.logx, dpi=args.dpi)
    md = render_markdown(report)
    (out / "comparison.md").write_text(md, encoding="utf-8")
    write_json_atomic(out / "comparison.json", report)
    return md


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    try:
        md = run_compare(args, argv)
    except CompareError as err:
        print(f"mltrain-compare: error: {err}", file=sys.stderr)
        return 1
    print(md)
    return 0


__all__ = ["main", "run_compare", "names", "SUMMARY"]
