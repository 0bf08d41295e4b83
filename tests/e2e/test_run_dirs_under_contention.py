"""Run dirs under contention: two runs started together into one dir never mix, and default dirs are
unique even within one second, for two runs started at once too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta

from helpers import ENV, SMOKE, TOOL_BIN, TOOL_SMOKE, file_tree, judge, make_earlier_run, one_error

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


def test_default_run_dirs_are_unique_even_within_one_second_and_two_runs_started_at_once_get_one_each(tmp_path):
    """Earlier runs sit in every default dir name of the next 90 seconds, as if started in the same second;
    two runs started at once by the installed `mltrain` each get a dir of their own, the first free name after
    their second's, each holding its own run's rows (the fault class "runs that mix" of
    test_fault_classes.py), and leave the earlier runs as they were."""
    now = datetime.now()
    taken = {}
    for s in range(90):
        t = now + timedelta(seconds=s)
        d = tmp_path / "outputs" / t.strftime("%Y-%m-%d") / t.strftime("%H-%M-%S")
        taken[d] = make_earlier_run(d)
    before = {d: file_tree(d) for d in taken}
    procs = [subprocess.Popen([str(TOOL_BIN / "mltrain"), *TOOL_SMOKE], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        judge(subprocess.CompletedProcess(p.args, p.returncode, out, err), code=0)
    assert {d: file_tree(d) for d in taken} == before
    runs = sorted(p.parent for p in (tmp_path / "outputs").rglob("summary.json") if p.parent not in taken)
    assert len(runs) == 2 and all(re.fullmatch(r"\d\d-\d\d-\d\d-\d+", d.name) for d in runs), runs
    for d in runs:  # the first free name: every lower suffix of its second taken by the other run
        base, n = d.name.rsplit("-", 1)
        assert all(d.with_name(f"{base}-{k}") in runs for k in range(1, int(n))), runs
    for d in runs:  # one run's rows: every line whole, each eval step once, FLOPs never decrease
        rows = read_metrics(d / "metrics.jsonl", strict=True)
        evals = [r["step"] for r in rows if "val/loss" in r]
        flops = [r.get("flops", 0) for r in rows]
        assert rows and evals == sorted(set(evals)) and flops == sorted(flops)
