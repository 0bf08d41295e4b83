"""A full disk during a run keeps whole rows and stops it with one line."""

from __future__ import annotations

import re

from helpers import TINY, one_error, run_tool

from mltrain.runs.files import read_metrics


def test_a_full_disk_keeps_whole_rows_and_stops_with_one_line(tmp_path, warm_cache):
    run_dir = tmp_path / "run"
    limit = 12_000  # bytes per file: .hydra/ and the log fit, metrics.jsonl does not
    proc = run_tool("mltrain", *TINY, "train.max_steps=200", "train.log_interval=1", "train.eval_interval=50",
               f"hydra.run.dir={run_dir}", cwd=tmp_path, limits={"RLIMIT_FSIZE": limit})
    line = one_error(proc)
    metrics = run_dir / "metrics.jsonl"
    assert str(metrics) in line and "the run stopped" in line
    data = metrics.read_bytes()
    assert 0 < len(data) <= limit and data.endswith(b"\n")
    rows = read_metrics(metrics, strict=True)  # every line whole
    kept = int(re.search(r"keeps its ([\d,]+) whole rows", line).group(1).replace(",", ""))
    assert len(rows) == kept and f"to step {rows[-1]['step']}" in line
    assert read_metrics(metrics) == rows  # compare's reader skips nothing
    assert not (run_dir / "summary.json").exists() and not list(run_dir.glob(".*.tmp"))
