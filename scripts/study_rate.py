"""The rate a study's runs train at here: FLOPs per second of real runs of its settings.

    python scripts/study_rate.py study=depth_ladder --rung L8 --budget 0.25 --parallel 2
    python scripts/study_rate.py study=depth_ladder --rung L4 --budget 0.25 --parallel 1 --data data=embedded

Runs `--parallel` copies (seeds 0, 1, ...) of the study's frontier arm at one rung and budget, each a
`mltrain` process with the study's launcher.env (OMP_NUM_THREADS=1 for the shipped ladders, as the local
launcher's workers run), train.max_steps as the planner sets it, in a temporary folder; then reads each
run's summary.json and prints one JSON: every run's seconds (wall_time_s: from its first held-out
evaluation on), its process's CPU time (start-up included: what the run needs of a core to itself), its
FLOPs (every phase: progress.measured, the units of a planned cost) and both rates, and the seconds per
FLOP the planner would take from them. Other processes on the machine slow the wall-clock rate: quote it
as a lower bound on speed; the CPU-time rate is the uncontended one, start-up counted. `--data` swaps the study's data override (the rate does not depend on the text).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("overrides", nargs="+", help="study=<name> and overrides of its keys")
    p.add_argument("--rung", required=True)
    p.add_argument("--budget", default="0.25")
    p.add_argument("--lr", default="0.3")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--data", default=None, help="e.g. data=embedded in place of the study's data override")
    args = p.parse_args()

    from mltrain.tools.study import compose
    from mltrain.tools.study.cli import compose_study
    from mltrain.tools.study.plan import arm_overrides
    from mltrain.tools.study.progress import measured
    from mltrain.tools.study.schema import frontier_arm

    study = compose.typed_study(compose_study(args.overrides))
    with compose.Composer() as composer:
        steps = compose.ladder_sizes(study, composer)[args.rung].max_steps
    fixed = arm_overrides(study, args.rung, frontier_arm(study), steps)
    if args.data:
        fixed = [o for o in fixed if not o.startswith("data=")] + [args.data]
    env = {**os.environ, **dict(study.launcher.env)}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for seed in range(args.parallel):
            out = Path(tmp) / f"seed{seed}"
            line = [str(Path(sys.executable).parent / "mltrain"), *fixed, f"train.budget={args.budget}", f"optim.lr={args.lr}",
                    f"seed={seed}", "train.progress=false", f"hydra.run.dir={out}"]
            log = open(Path(tmp) / f"seed{seed}.log", "wb")
            procs.append((out, log, subprocess.Popen(line, env=env, stdout=subprocess.DEVNULL, stderr=log)))
        runs = []
        for out, log, proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)  # the process's own CPU time: what it needs of a free core
            log.close()
            if status:
                sys.exit(f"study_rate: a run failed ({status}): {Path(log.name).read_text()[-2000:]}")
            seconds, flops = measured(json.loads((out / "summary.json").read_text()))
            cpu = usage.ru_utime + usage.ru_stime
            runs.append({"seconds": round(seconds, 2), "cpu_s": round(cpu, 2), "flops": flops,
                         "flop_per_s": round(flops / seconds), "flop_per_cpu_s": round(flops / cpu)})
    print(json.dumps({"study": study.name, "rung": args.rung, "max_steps": steps, "budget": args.budget,
                      "parallel": args.parallel, "threads": env.get("OMP_NUM_THREADS"), "load": os.getloadavg(),
                      "runs": runs, "s_per_flop": sum(r["seconds"] for r in runs) / sum(r["flops"] for r in runs),
                      "cpu_s_per_flop": sum(r["cpu_s"] for r in runs) / sum(r["flops"] for r in runs)}, indent=1))


if __name__ == "__main__":
    main()
