"""Reprint a committed verdict from its records, wherever this clone lives, and say whether every figure is
the same: the check "mltrain-compare on a rung's records from a fresh clone reprints the rung's figures".

    python scripts/reprint_verdict.py results/depth_ladder/L4/verdict
    python scripts/reprint_verdict.py results/depth_ladder/L*/verdict      # several at once

A verdict's comparison.json holds the mltrain-compare command that wrote it, with the absolute paths of the
machine that ran the study (e.g. /work/main/results/depth_ladder/L4/...). Those paths are mapped onto this
clone's copy of the study folder (the verdict's grandparent), mltrain-compare runs again with `--out` in a
temporary folder (nothing is written beside the records), and the new comparison.json and comparison.md,
with the paths mapped back, are compared byte for byte with the committed ones. comparison.png is compared
too when both exist (matplotlib writes the same bytes for the same figure and version).
Exit status 0 when every file is identical, 1 when one differs (named, with its first differing line).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

TEXT = ("comparison.json", "comparison.md")


def command_of(verdict: Path) -> list[str]:
    """The mltrain-compare arguments (without the program name) that wrote `verdict`."""
    return shlex.split(json.loads((verdict / "comparison.json").read_text())["command"])[1:]


def mapped(args: list[str], old: str, new: str, out: str) -> tuple[list[str], str]:
    """`args` with the study folder `old` replaced by `new` and `--out`'s value by `out`; also the old
    `--out` value (to map the reprinted files' paths back)."""
    if "--out" not in args:
        raise SystemExit("error: the verdict's command has no --out: not a verdict written by mltrain-compare --out")
    i = args.index("--out") + 1
    old_out, result = args[i], []
    for k, arg in enumerate(args):
        if k == i:
            result.append(out)
        elif arg == old or arg.startswith(old + "/"):
            result.append(new + arg[len(old):])
        else:
            result.append(arg)
    return result, old_out


def first_difference(a: str, b: str) -> str:
    for n, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return f"line {n}: committed {x.strip()[:100]!r}, reprinted {y.strip()[:100]!r}"
    return f"lengths differ ({len(a.splitlines())} vs {len(b.splitlines())} lines)"


def reprint(verdict: Path, compare: str) -> list[str]:
    """Reprint one verdict; the differences found (empty: identical)."""
    verdict = verdict.resolve()
    args = command_of(verdict)
    old_out = args[args.index("--out") + 1] if "--out" in args else ""
    old_study = str(Path(old_out).parent.parent)  # <study>/<rung>/verdict
    new_study = str(verdict.parent.parent)
    with tempfile.TemporaryDirectory(prefix="reprint-") as tmp:
        out = str(Path(tmp) / "verdict")
        new_args, old_out = mapped(args, old_study, new_study, out)
        proc = subprocess.run([compare, *new_args], capture_output=True, text=True)
        if proc.returncode != 0:
            return [f"mltrain-compare failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"]
        diffs = []
        for name in TEXT:
            committed = (verdict / name).read_text()
            again = (Path(out) / name).read_text().replace(out, old_out).replace(new_study, old_study)
            if again != committed:
                diffs.append(f"{verdict / name}: {first_difference(committed, again)}")
        png, png_again = verdict / "comparison.png", Path(out) / "comparison.png"
        if png.exists() and png_again.exists() and png.read_bytes() != png_again.read_bytes():
            diffs.append(f"{png}: the image differs")
        return diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("verdicts", nargs="+", type=Path, help="verdict folders (each holding comparison.json)")
    here = Path(sys.executable).parent / "mltrain-compare"  # this environment's, when it has one
    p.add_argument("--compare", default=str(here) if here.exists() else "mltrain-compare",
                   help="the mltrain-compare to run (default: this Python environment's)")
    a = p.parse_args(argv)
    missing = [str(v) for v in a.verdicts if not (v / "comparison.json").is_file()]
    if missing:
        print(f"error: no comparison.json in {', '.join(missing)}", file=sys.stderr)
        return 2
    failed = 0
    for v in a.verdicts:
        diffs = reprint(v, a.compare)
        print(f"{v}: {'identical' if not diffs else 'DIFFERS'}")
        for d in diffs:
            print(f"  {d}")
        failed += bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
