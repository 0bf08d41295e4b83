"""Regenerate a shipped mltrain-compare verdict with this checkout and with a reference install, from the
same runs, and `cmp` the two: comparison.json, comparison.md and comparison.png must be byte-identical.
Also reads the shipped comparison.json back into the typed `Report` and writes it again: the same bytes;
and has each install write a study ladder (three rungs whose verdict is that report, with tuning records)
through the study's types and renderer: ladder.json, ladder.md and ladder.png byte-identical too.

    python scripts/check_reports_unchanged.py                      # the depth ladder's L4 verdict vs /work/main
    python scripts/check_reports_unchanged.py --verdict results/depth_ladder/L4/verdict \\
        --reference /work/main/.venv/bin/mltrain-compare

The run folders named on the verdict's command line are copied into a temporary folder first, under
the rung's own folder name (the reports name their runs' paths, so both installs read the same copies;
nothing is written beside the shipped results). The two installs must be of the same verdict rules:
the reference is the code a change started from (a change of the rules, e.g. the schedule control's
wall-clock reading in 64fedd3, is meant to change the reports).
Exit status 0 when every file is identical, 1 when one differs (named on stdout).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mltrain.runs.files import json_default
from mltrain.tools.compare import Report

FILES = ("comparison.json", "comparison.md", "comparison.png")
LADDER = ("ladder.json", "ladder.md", "ladder.png")


def read_back_identical(shipped: Path) -> bool:
    """The shipped comparison.json, read as a `Report` and written as mltrain-compare writes it: same bytes."""
    text = shipped.read_text()
    again = json.dumps(Report.from_json(json.loads(text)).to_json(), indent=2, sort_keys=True, default=json_default)
    return again + "\n" == text


def copied_command(verdict: Path, tmp: Path) -> list[str]:
    """The verdict's mltrain-compare arguments, its run folders copied under `tmp` and `--out` there."""
    args = shlex.split(json.loads((verdict / "comparison.json").read_text())["command"])[1:]
    runs = [Path(a) for a in args if Path(a).is_dir() and a != str(verdict)]
    root = Path(*Path(min(map(str, runs))).parts[:-3])  # <rung>/<stage>/<arm>/<run>: the rung's folder
    out = []
    for arg in args:
        if Path(arg) in runs:
            dest = tmp / root.name / Path(arg).relative_to(root)
            shutil.copytree(arg, dest, dirs_exist_ok=True)
            arg = str(dest)
        out.append(str(tmp / "out") if out and out[-1] == "--out" else arg)
    return out


def write_ladder(verdict: Path, out: Path) -> None:
    """A three-rung ladder (ladder.json, .md, .png under `out`) whose every rung's verdict is the shipped
    comparison.json (at 1x, 2x and 4x its parameters), each with a tuning record: the study's types and
    renderer through whichever install runs this (`--ladder`)."""
    from mltrain.tools.study import ladder
    try:
        from mltrain.tools.study.rungs import ArmTuning, RungTuning, SettingLosses
    except ImportError:  # an install whose compare holds the study's types
        from mltrain.tools.compare import ArmTuning, RungTuning, SettingLosses  # type: ignore[attr-defined,no-redef]
    report = Report.from_json(json.loads((verdict / "comparison.json").read_text()))
    arms = [a.name for a in report.arms]
    frontier = next(a.name for a in report.arms if a.is_frontier)
    losses = (SettingLosses({"optim.lr": "0.1"}, {"0": 2.1}, 2.1),)
    tuning = {f"R{i}": RungTuning(("0.5", "1.0"), (0,), {frontier: ArmTuning(0, 3, 3, losses, 1, losses, {}, {}, {}),
                                                          arms[1]: ArmTuning(1, 2, 2, losses)}) for i in range(2)}
    rungs = [ladder.ScaleResult(f"R{i}", 1_000_000 * 2 ** i, 1824, 20.0, {a.name: a.label for a in report.arms},
                                {a.name: a.run_kind for a in report.arms}, comparison=report) for i in range(3)]
    made = ladder.ladder_report("check", arms, frontier, rungs, [1e8], tuning=tuning)
    ladder.write_ladder(made, out / "ladder", root=out)


def regenerate(cli: str, args: list[str], tmp: Path, name: str) -> Path:
    subprocess.run([cli, *args], check=True, stdout=subprocess.DEVNULL)
    return Path(shutil.move(tmp / "out", tmp / name))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--verdict", type=Path, default=Path("/work/main/results/depth_ladder/L4/verdict"))
    p.add_argument("--reference", default="/work/main/.venv/bin/mltrain-compare")
    p.add_argument("--this", default=str(Path(sys.executable).with_name("mltrain-compare")))
    p.add_argument("--ladder", type=Path, help="only write the check's ladder into this folder (run by each install)")
    a = p.parse_args(argv)
    if a.ladder is not None:
        write_ladder(a.verdict, a.ladder)
        return 0
    ok = read_back_identical(a.verdict / "comparison.json")
    print(f"{a.verdict / 'comparison.json'} read back and written again: {'identical' if ok else 'DIFFERS'}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        args = copied_command(a.verdict, tmp)
        ref, this = regenerate(a.reference, args, tmp, "reference"), regenerate(a.this, args, tmp, "this")
        for name in FILES:
            same = filecmp.cmp(ref / name, this / name, shallow=False)
            ok &= same
            print(f"{name}: {'identical' if same else 'DIFFERS'} ({a.reference} vs {a.this})")
        for cli, name in ((a.reference, "ladder_reference"), (a.this, "ladder_this")):
            python = str(Path(cli).with_name("python"))
            subprocess.run([python, __file__, "--verdict", str(a.verdict), "--ladder", str(tmp / name)], check=True)
        for name in LADDER:
            same = filecmp.cmp(tmp / "ladder_reference" / name, tmp / "ladder_this" / name, shallow=False)
            ok &= same
            print(f"{name} (a ladder of the verdict's report at three rungs): {'identical' if same else 'DIFFERS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
