"""The finding's numbers, rendered from a finished study's reports (results/<study>/ladder.json and its rungs'
verdicts): the block README.md's "What we found" shows for a ladder (docs/results-cpu.md for a one-rung
study), so that the numbers there are the reports' and nothing else.

    python scripts/finding.py results/depth_ladder                    # print the block
    python scripts/finding.py results/depth_ladder --check README.md  # is README.md's block the same?
    python scripts/finding.py results/depth_ladder --write README.md  # replace README.md's block with it

The block sits between `<!-- finding: results/<study> -->` (the study's path from the folder above the
README that holds it) and `<!-- /finding -->`: one row per rung (its value on the ladder's axis, its
parameters), one column per arm measured against the frontier (its M with the 95% interval, as ladder.md
prints it less its "(interpolated)", the usual reading on the frontier's points; a † marks one read beyond
them), then, where the study has the LR-schedule control
(`schedule_control`), the M over the control's of each arm whose coarse phases the control mirrors (the
same `multilevel.coarse_steps` in its label: the paper's method, random coarsening, the ODE step; not
stacking or RaPTr) at that rung: what the arm gains beyond the schedule. Both M are read against the same
frontier, the one without the control's runs (the control's own M is read there; each other arm's
reading there is in the rung's comparison.json, its tuning space's "schedule control" gain). Its 95%
interval is Welch's t interval on the difference of the two log M (each with its standard error and
degrees of freedom), the two taken as independent: they share that frontier and the seeds, so the
interval is an approximation. Where the arm's reading is a bound (beyond that frontier's data with 97.5%
confidence), the cell is that bound over the control's upper limit ("> x", at least 95% by Bonferroni).
Then, for a ladder of two rungs or more, three rows of each arm's trend along the axis, as ladder.json
holds it: the slope of log M against log x with its 95% interval and word, the first-to-last change of log
M with its interval, and the steps between neighbouring rungs that resolve (up or down).
The prose around the block (what the numbers mean, what the control explains) is written by hand.
`--check` exits 1 naming the first differing line (or the block's absence); tests/docs/test_finding.py runs
it on every results/<study>/ladder.json of the repository.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Optional, TypeVar

from scipy import stats

from mltrain.core.jsonable import Jsonable, ShapeError
from mltrain.tools.compare import Report
from mltrain.tools.compare.dimensions import CONTROL_DIMENSION
from mltrain.tools.compare.results import GainReading
from mltrain.tools.study.axes import AXES
from mltrain.tools.study.ladder_md import multiplier_text
from mltrain.tools.study.plan import Layout
from mltrain.tools.study.rungs import Ladder, Rung, Trend

R = TypeVar("R", bound=Jsonable)
END = "<!-- /finding -->"
CONTROL = "schedule_control"


def opening(study: str) -> str:
    return f"<!-- finding: {study} -->"


def _cell(rung: Rung, arm: str) -> str:
    row = next((r for r in rung.arms if r.arm == arm), None)
    if row is None or row.result is None:
        return "no result"
    text, _ = multiplier_text(row.result.multiplier)  # as ladder.md prints it, but for the mark of a reading
    text = text.replace(" (interpolated)", "")  # on the data, the usual case: the README says so once
    return text + (" ‡" if row.result.within_fit_error else "")


def _read(path: Path, kind: type[R]) -> R:
    """A report (a `Report` or a `Ladder`) from its JSON; one error line, not a traceback, for a file that is
    not one: unreadable, not JSON, or JSON of another shape (where, and what was found there)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SystemExit(f"error: {path}: not a readable report ({err})") from None
    try:
        return kind.from_json(data)
    except ShapeError as err:
        raise SystemExit(f"error: {path}: not a readable report (not a {kind.__name__}: {err})") from None


def control_frontier(folder: Path, rung: Rung) -> dict[str, GainReading]:
    """Each arm's M against the frontier without the schedule control's runs, the one the control's own M is
    read on, by the arm's label (the ladder's rows carry the verdict's labels): the rung's comparison.json
    (its tuning space's gains); {} without it."""
    path = Layout(folder, {}).verdict(rung.scale) / "comparison.json"
    if not path.is_file():
        return {}
    report = _read(path, Report)
    gain = next((g for g in report.frontier.gains if g.dimension == CONTROL_DIMENSION), None) if report.frontier else None
    return {a.label: gain.arms[a.name] for a in report.arms if a.name in gain.arms} if gain is not None else {}


def over_control(rung: Rung, arm: str, readings: dict[str, GainReading], control: str = CONTROL) -> str:
    """The arm's M over the control's at `rung`, both against the frontier without the control's runs
    (`readings`), with Welch's 95% interval on the difference of their log M; where the arm's is a bound
    (a 97.5% lower limit), the bound over the control's upper limit (Bonferroni: at least 95%); "—" where
    either has no interval."""
    labels = {r.arm: r.label for r in rung.arms if r.result is not None and r.label}
    a, c = (readings.get(labels.get(x, "")) for x in (arm, control))
    if a is None or c is None:
        return "—"
    if a.bound is not None and c.M_hi:
        return f"> {a.bound / c.M_hi:.3f}"
    if not (a.M and a.log_se and a.dof and c.M and c.log_se and c.dof):
        return "—"
    diff = math.log(a.M) - math.log(c.M)
    se = math.hypot(a.log_se, c.log_se)
    dof = se ** 4 / (a.log_se ** 4 / a.dof + c.log_se ** 4 / c.dof)  # Welch-Satterthwaite
    q = float(stats.t.ppf(0.975, dof))
    return f"{math.exp(diff):.3f} [{math.exp(diff - q * se):.3f}, {math.exp(diff + q * se):.3f}]"


def _coarse_steps(label: Optional[str]) -> Optional[str]:
    found = re.search(r"(?:^|,)multilevel\.coarse_steps=(\d+)(?:,|$)", label or "")
    return found.group(1) if found else None


def mirrored(rung: Rung, arms: list[str], control: str = CONTROL) -> list[str]:
    """The arms whose coarse phases the control mirrors: the same `multilevel.coarse_steps` in their labels
    as the control's (the paper's method and its variants: random coarsening, the ODE step); not stacking
    or RaPTr, which have no coarse phases for the control to replace. None without the control."""
    labels = {row.arm: row.label for row in rung.arms}
    steps = _coarse_steps(labels.get(control)) if control in arms else None
    return [a for a in arms if a != control and steps is not None and _coarse_steps(labels.get(a)) == steps]


def _trend_rows(ladder: Ladder, arms: list[str], blank: int) -> list[str]:
    """Three rows under the rungs, per arm its trend along the axis: the slope of log M against log x with
    its word, the first-to-last change of log M, and the steps between neighbouring rungs that resolve."""
    trends = {t.arm: t for t in ladder.trends}
    rest = " |" * blank

    def row(title: str, cell) -> str:
        return f"| {title} | |" + "".join(f" {cell(trends[a]) if a in trends else ''} |" for a in arms) + rest

    def slope(t: Trend) -> str:
        return f"{t.verdict}: {t.slope:+.3f} [{t.slope_lo:+.3f}, {t.slope_hi:+.3f}]" if t.slope is not None else t.verdict

    def contrast(t: Trend) -> str:
        return f"{t.contrast:+.3f} [{t.contrast_lo:+.3f}, {t.contrast_hi:+.3f}]" if t.contrast is not None else "—"

    def steps(t: Trend) -> str:
        told = [f"{s.x_from:g}→{s.x_to:g} {s.word}" for s in t.steps if s.word != "unresolved"]
        left = sum(1 for s in t.steps if s.word == "unresolved")
        if not t.steps:
            return "—"
        return ", ".join(told) + (f" ({left} unresolved)" if told and left else "") if told else f"all {left} unresolved"

    # "on log x": the first column names the axis
    return [row("slope of log M", slope), row("first → last, log M", contrast), row("steps", steps)]


def render(folder: Path, name: str) -> str:
    """The block for the study in `folder` (its ladder.json), `name` its path as the README names it."""
    path = folder / "ladder.json"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: the study has not written its ladder report (is it finished?)")
    ladder = _read(path, Ladder)
    if ladder.axis not in AXES:
        raise SystemExit(f"error: {path}: not a readable report (axis {ladder.axis!r}: not one of {', '.join(AXES)})")
    axis = AXES[ladder.axis]
    arms = [a.arm for a in ladder.rungs[0].arms if a.arm != ladder.frontier_arm] if ladder.rungs else []
    beyond = mirrored(ladder.rungs[0], arms) if ladder.rungs else []
    heads = arms + [f"{a} ÷ control" for a in beyond]
    lines = [opening(name), f"| {axis.unit} | parameters | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for r in ladder.rungs:
        readings = control_frontier(folder, r) if beyond else {}  # the rung's verdict, read once
        cells = [_cell(r, a) for a in arms] + [over_control(r, a, readings) for a in beyond]
        lines.append(f"| {r.x:g} | {r.n_params:,} | " + " | ".join(cells) + " |")
    if len(ladder.rungs) > 1:  # one rung has no trend to tell (ladder.md says "one rung: none to tell")
        lines += _trend_rows(ladder, arms, len(beyond))
    missing = [f"{r.scale}: {r.why_no_verdict}" for r in ladder.rungs if r.why_no_verdict]
    if missing:
        lines += [""] + [f"- No verdict at {m}" for m in missing]
    return "\n".join(lines + [END]) + "\n"


def block_in(text: str, name: str) -> str | None:
    """The block for `name` in `text` (from its opening line to its end marker), or None."""
    found = re.search(re.escape(opening(name)) + r".*?" + re.escape(END) + r"\n?", text, flags=re.S)
    if found is None:
        return None
    block = found.group(0)
    return block if block.endswith("\n") else block + "\n"


def difference(expected: str, found: str | None) -> str | None:
    """Where the README's block differs from the rendered one (None: identical)."""
    if found is None:
        return "no block: the README does not show this study's finding"
    for n, (a, b) in enumerate(zip(expected.splitlines(), found.splitlines()), 1):
        if a != b:
            return f"line {n} of the block: the report gives {a!r}, the README has {b!r}"
    if expected != found:
        return f"the block has {len(found.splitlines())} lines, the report gives {len(expected.splitlines())}"
    return None


def block_name(study: Path, readme: Optional[Path]) -> str:
    """The study as its block names it: its path from the nearest folder at or above the README's that holds
    it (results/depth_ladder for README.md and docs/results-cpu.md alike), so that the check gives the same
    answer from any working folder; as given where none holds it."""
    if readme is not None:
        folder, target = readme.resolve().parent, study.resolve()
        for above in (folder, *folder.parents):
            if target.is_relative_to(above) and above != Path(above.anchor):  # not the filesystem's root
                return target.relative_to(above).as_posix()
    return study.as_posix().rstrip("/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path, help="the study's folder (holding ladder.json), e.g. results/depth_ladder")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", type=Path, metavar="README", help="exit 1 if README's block differs")
    what.add_argument("--write", type=Path, metavar="README", help="replace README's block (it must have one)")
    args = parser.parse_args(argv)
    readme = args.check or args.write
    name = block_name(args.study, readme)
    block = render(args.study, name)
    if readme is None:
        sys.stdout.write(block)
        return 0
    try:
        text = readme.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SystemExit(f"error: {readme}: cannot be read ({err})") from None
    found = block_in(text, name)
    if args.write is not None:
        if found is None:
            raise SystemExit(f"error: {readme} has no line {opening(name)!r} ... {END!r} to replace: add them first")
        readme.write_text(text.replace(found, block))
        return 0
    why = difference(block, found)
    if why is not None:
        print(f"{readme}: {name}: {why}")
        return 1
    print(f"{readme}: {name}: the same numbers as {args.study / 'ladder.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
