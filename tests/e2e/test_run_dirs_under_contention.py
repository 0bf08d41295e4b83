"""Run dirs under contention: two runs started together into one dir never mix, and default dirs are
unique even within one second."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta

from helpers import SMOKE, file_tree, make_earlier_run, one_error, run_tool

from mltrain.runs.files import read_metrics


def test_two_runs_started_together_into_one_dir_never_mix(tmp_path):
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "mltrain.cli", *SMOKE, f"hydra.run.dir={run_dir}"]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], [r[2][-2000:] for r in results]
    loser = next(r for r in results if r[0] == 2)
    one_error(subprocess.CompletedProcess(args, loser[0], loser[1], loser[2]))
    rows = read_metrics(run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    # one run's rows: each eval step once, the last row is the summary's
    evals = [r["step"] for r in rows if "val/loss" in r]
    assert evals == sorted(set(evals)) and rows[-1]["flops"] == summary["total_flops"]


def test_default_run_dirs_are_unique_even_within_one_second(tmp_path):
    # Earlier runs sit in every default dir name of the next minute: as if started in the same second.
    now = datetime.now()
    taken = {}
    for s in range(90):
        t = now + timedelta(seconds=s)
        d = tmp_path / "outputs" / t.strftime("%Y-%m-%d") / t.strftime("%H-%M-%S")
        taken[d] = make_earlier_run(d)
    before = {d: file_tree(d) for d in taken}
    proc = run_tool("mltrain", *SMOKE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {d: file_tree(d) for d in taken} == before
    (summary,) = [p for p in (tmp_path / "outputs").rglob("summary.json") if p.parent not in taken]
    assert re.fullmatch(r"\d\d-\d\d-\d\d-1", summary.parent.name)
