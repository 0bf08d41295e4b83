"""How much of a study is overhead: its wall time beside the sum of its runs' own training time.

    python scripts/bench_study.py study=smoke
    python scripts/bench_study.py study=cpu_ladder --dir /tmp/cpu_ladder --keep

Runs `mltrain-study <overrides>` in this process on a fresh folder (the clock starts before mltrain is
imported, so start-up counts), then reads every run's summary.json and prints one JSON:

* wall_s: the study's wall time, from start-up to the ladder report;
* train_s: the sum of the runs' own time (train_time_s where a run records it, else wall_time_s: from
  its first held-out evaluation to its end, so data loading, model building and Hydra are left out);
* slots: runs that can train at once (launcher.n_jobs; 1 for the basic launcher);
* overhead_share = 1 - train_s / (wall_s x slots): the share of the workers' time not spent training
  (start-up, config composition, data, model building, checkpoints and weights, the verdicts, the
  reports, and workers idle at the end of a sweep); per_run_overhead_s = the same time per run.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def bench(overrides: list[str], folder: Path) -> dict:
    from mltrain.tools.study.cli import compose_study, main

    code = main([*overrides, f"dir={folder}"])
    wall = time.perf_counter() - START
    summaries = [json.loads(p.read_text()) for p in folder.rglob("summary.json")]
    train = sum(s.get("train_time_s", s.get("wall_time_s", 0.0)) for s in summaries)
    cfg = compose_study([*overrides, f"dir={folder}"])
    slots = 1 if cfg.launcher.name == "basic" else (cfg.launcher.n_jobs or 1)
    return {"study": cfg.name, "exit_status": code, "launcher": cfg.launcher.name, "slots": slots,
            "runs": len(summaries), "wall_s": round(wall, 1), "train_s": round(train, 1),
            "overhead_share": round(1 - train / (wall * slots), 3),
            "per_run_overhead_s": round((wall * slots - train) / max(len(summaries), 1), 2)}


def run(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="+", help="study=<name> and overrides, as for mltrain-study")
    p.add_argument("--dir", help="the study's folder (must not exist; default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the study's folder")
    args = p.parse_args(argv)
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_study_")) / "study"
    if args.dir and folder.exists():
        p.error(f"--dir {folder} exists: a benchmark needs a fresh study")
    try:
        return bench(args.overrides, folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder if args.dir else folder.parent, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:]), indent=1))
