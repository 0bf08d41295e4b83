"""Re-measure one rung of a study with plain `mltrain -m` sweeps and `mltrain-compare`, on seeds the study
never used, and set each arm's M beside the study's.

    python scripts/replicate_rung.py results/depth_ladder/L12 --seeds 11,12,13,14,15 [--out DIR] [--run] [--jobs 2]

The rung's evaluation runs in the records (`<rung>/eval/<arm>/<run>/.hydra/overrides.yaml`, what each run
was launched with) give the configurations: each distinct one, without its seed and the study's bookkeeping
keys (resume, progress bar, W&B tags), becomes one `mltrain -m` sweep over the new seeds into
`<out>/<arm>/<n>/seed=<s>`. Then one `mltrain-compare` over `<out>` with the study verdict's own `--tune`
keys (no selection seeds: every setting here was chosen by the study, on seeds the replication does not
use). Without `--run` the commands are printed, to be run anywhere; with it they run here and, once the
comparison exists, each arm's M and interval is printed beside the study's, with whether they overlap.
A seed any run of the rung used is refused before anything runs.

The sweeps run as the study ran its runs: `--jobs N` of them at once through the `local` launcher, each
with one thread (OMP_NUM_THREADS=1, MKL_NUM_THREADS=1) where N > 1, and with `train.resume=true`, so the
same command run again (on this machine or on a clone that carries `<out>`) skips the finished runs,
resumes the interrupted ones and starts the rest. `<out>/.gitignore` keeps what a study's records keep
(each run's summary.json, metrics.jsonl, run.json and .hydra config and overrides, the verdict): `git add
<out>` takes those and no weights, checkpoints or logs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from mltrain.tools.compare import Report

BOOKKEEPING = ("seed=", "train.resume=", "train.progress=", "logger.", "hydra.")
GITIGNORE = """# Written by scripts/replicate_rung.py: `git add` of this folder takes the replication's records only.
*
!*/
!/.gitignore
!/*/*/*/summary.json
!/*/*/*/metrics.jsonl
!/*/*/*/run.json
!/*/*/*/.hydra/config.yaml
!/*/*/*/.hydra/overrides.yaml
!/verdict/comparison.json
!/verdict/comparison.md
!/verdict/comparison.png
checkpoints/
wandb/
"""


def configurations(rung: Path) -> dict[tuple[str, tuple[str, ...]], list[int]]:
    """(arm folder, the overrides without seed and bookkeeping) -> the seeds the study ran it on."""
    found: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for file in sorted(rung.glob("eval/*/*/.hydra/overrides.yaml")):
        overrides = [str(o) for o in yaml.safe_load(file.read_text())]
        seed = next(int(o.split("=", 1)[1]) for o in overrides if o.startswith("seed="))
        kept = tuple(o for o in overrides if not o.startswith(BOOKKEEPING))
        found.setdefault((file.parents[2].name, kept), []).append(seed)
    return found


def used_seeds(rung: Path) -> set[int]:
    seeds = set()
    for file in rung.glob("*/*/*/.hydra/overrides.yaml"):
        seeds |= {int(o.split("=", 1)[1]) for o in yaml.safe_load(file.read_text()) if str(o).startswith("seed=")}
    return seeds


def tune_flags(rung: Path) -> list[str]:
    """The study verdict's `--tune KEY` flags (its comparison.json's command)."""
    words = shlex.split(json.loads((rung / "verdict" / "comparison.json").read_text())["command"])
    return [w for i, w in enumerate(words) if w == "--tune" or (i and words[i - 1] == "--tune")]


def commands(rung: Path, seeds: list[int], out: Path, jobs: int = 1) -> list[list[str]]:
    sweeps: list[list[str]] = []
    counts: dict[str, int] = {}
    launcher = ["hydra/launcher=local", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 else []
    for (arm, overrides), _ in configurations(rung).items():
        n = counts[arm] = counts.get(arm, -1) + 1
        # the subdir quoted for Hydra's parser: an unquoted "=" in a value is refused
        sweeps.append(["mltrain", "-m", *overrides, f"seed={','.join(map(str, seeds))}", "train.resume=true",
                       *launcher, f"hydra.sweep.dir={out / arm / str(n)}", 'hydra.sweep.subdir="seed=${seed}"'])
    return [*sweeps, ["mltrain-compare", str(out), "--out", str(out / "verdict"), *tune_flags(rung)]]


def _program(name: str) -> str:
    """The console script `name` of this Python's environment (a venv's bin/, active or not), else PATH's."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else name


def intervals(report: Path) -> dict[str, tuple[str, float, float, float]]:
    """label -> (the arm's readable name, M, lower, upper) of each arm's headline (M nan for a bound, where
    only the lower limit is decided; upper inf when unbounded)."""
    out = {}
    for arm in Report.from_json(json.loads(report.read_text())).arms:  # the typed verdict, as mltrain-compare reads it
        head = arm.multiplier.headline if arm.multiplier is not None else None
        if head is not None and head.M_lo is not None and not arm.is_frontier:
            out[arm.label] = (arm.name or arm.label, float("nan") if head.M is None else head.M, head.M_lo,
                              float("inf") if head.M_hi is None else head.M_hi)
    return out


def _m(m: float, lo: float, hi: float) -> str:
    return f"> {lo:.3g}×" if math.isnan(m) else f"{m:.3g}× [{lo:.3g}×, {hi:.3g}×]"


def short_names(names: list[str]) -> list[str]:
    """The readable names (parts joined by " · ", the arm's kind first) without what every row shares and
    without the `experiment=` part that repeats the kind: what tells the rows apart."""
    parts = [name.split(" · ") for name in names]
    shared = set.intersection(*(set(p[1:]) for p in parts)) if len(parts) > 1 else set()
    return [" · ".join([p[0], *(x for x in p[1:] if x not in shared and x != f"experiment={p[0]}")]) for p in parts]


def side_by_side(study: Path, replication: Path) -> list[str]:
    """One row per arm of the study's verdict (by its readable name there, less what every row shares):
    its M beside the replication's and whether the two intervals overlap (a bound: its lower limit to
    infinity)."""
    mine, theirs = intervals(replication), intervals(study)
    names = dict(zip(theirs, short_names([name for name, *_ in theirs.values()])))
    lines = ["| arm | study M [interval] | replication M [interval] | overlap |", "|---|---|---|---|"]
    for label, (_, m, lo, hi) in theirs.items():
        name = names[label]
        if label not in mine:
            lines.append(f"| {name} | {_m(m, lo, hi)} | not measured | — |")
            continue
        _, r, rlo, rhi = mine[label]
        lines.append(f"| {name} | {_m(m, lo, hi)} | {_m(r, rlo, rhi)} | {'yes' if rlo <= hi and lo <= rhi else 'NO'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rung", type=Path, help="a rung's folder of a study's records, e.g. results/depth_ladder/L12")
    parser.add_argument("--seeds", default="11,12,13,14,15", help="comma-separated seeds the study never used")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default outputs/replicate/<study>/<rung>)")
    parser.add_argument("--run", action="store_true", help="run the commands here, then print the side-by-side table")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (1: one run at a time)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    rung = args.rung.resolve()
    if not (rung / "verdict" / "comparison.json").is_file() or not configurations(rung):
        parser.error(f"{args.rung}: no evaluated rung there (eval/*/*/.hydra/overrides.yaml and verdict/comparison.json)")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: comma-separated integers")
    if len(set(seeds)) < len(seeds):
        parser.error(f"--seeds {args.seeds!r}: a seed named twice (each seed is one run per configuration)")
    out = (args.out or Path("outputs") / "replicate" / rung.parent.name / rung.name).resolve()
    try:  # the rung's records, read before anything runs: a damaged one is one line
        used, todo = used_seeds(rung), commands(rung, seeds, out, args.jobs)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as err:
        parser.error(f"{args.rung}: a record there is not readable ({type(err).__name__}: {err})")
    if clash := sorted(set(seeds) & used):
        parser.error(f"--seeds: the study's runs at {rung.name} used {clash}: a replication needs seeds it never used")
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if args.jobs > 1 else {}
    prefix = " ".join(f"{k}={v}" for k, v in threads.items())
    for cmd in todo:
        print(f"{prefix} {shlex.join(cmd)}" if prefix and cmd[0] == "mltrain" else shlex.join(cmd))
    if not args.run:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    (out / ".gitignore").write_text(GITIGNORE)
    for cmd in todo:
        env = {**os.environ, **threads} if cmd[0] == "mltrain" else None
        if subprocess.run([_program(cmd[0]), *cmd[1:]], env=env).returncode != 0:
            print(f"replicate_rung: failed: {shlex.join(cmd)}", file=sys.stderr)
            return 1
    print("\n".join(side_by_side(rung / "verdict" / "comparison.json", out / "verdict" / "comparison.json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
