"""The study's ETA: the planned FLOPs left at the seconds per FLOP the finished runs measured
(summary.json), over the runs that train at once; none before a run has finished. A run has ended only
when its summary.json is a JSON object that says so."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from mltrain.tools.study.progress import Progress, ended, measured, run_status


def run(name: str):
    return SimpleNamespace(name=name)


def summary(seconds: float, flops: float, **extra) -> dict:
    return {"status": "finished", "final_val_loss": 3.0, "wall_time_s": seconds, "total_flops": flops,
            "eval_flops": 0.0, "diag_flops": 0.0, **extra}


def eta(line: str) -> str:
    return line.rsplit("ETA", 1)[1].strip()


def test_the_eta_after_one_finished_run_is_its_measured_rate_times_the_flops_left():
    out = io.StringIO()
    progress = Progress(out, total=3, done=0, cost_left=3e12)
    progress.ended(run("a"), summary(seconds=60.0, flops=1e12), cost=1e12)
    assert eta(out.getvalue().splitlines()[-1]) == "2 min"  # 2e12 FLOPs left at 60 s per 1e12
    progress.ended(run("b"), summary(seconds=180.0, flops=1e12, eval_flops=2e12), cost=1e12)
    assert eta(out.getvalue().splitlines()[-1]) == "60 s"  # 240 s per 4e12: 1e12 left in 60 s


def test_the_eta_divides_by_the_runs_that_train_at_once_and_waits_for_a_first_run():
    out = io.StringIO()
    progress = Progress(out, total=5, done=0, cost_left=5e12, parallel=4)
    progress.settle(run("failed"), 1e12, "FAILED: no")
    assert out.getvalue().splitlines()[-1].endswith("ETA after the first run")  # a failure measures nothing
    progress.ended(run("a"), summary(seconds=100.0, flops=1e12), cost=1e12)
    assert eta(out.getvalue().splitlines()[-1]) == "75 s"  # 3e12 left at 100 s per 1e12, four at once


def test_a_summary_without_numbers_measures_nothing():
    assert measured({"status": "finished"}) is None
    assert measured({"total_flops": "many", "wall_time_s": 3}) is None
    assert measured({"total_flops": 1e9, "train_time_s": 2.0}) == (2.0, 1e9)
    assert measured(summary(4.0, 1e9, eval_flops=1e8, diag_flops=1e8)) == (4.0, 1.2e9)


def test_the_eta_adds_each_run_lefts_start_up_which_a_summarys_wall_time_leaves_out():
    out = io.StringIO()
    progress = Progress(out, total=4, done=0, cost_left=4e12, parallel=4, start_s=5.0)
    progress.ended(run("a"), summary(seconds=60.0, flops=1e12), cost=1e12)
    assert eta(out.getvalue().splitlines()[-1]) == "49 s"  # (3e12 at 60 s per 1e12 + 3 start-ups of 5 s) / 4


@pytest.mark.parametrize("text", ["[]", '"finished"', "3", '{"status": "fin', ""])
def test_a_summary_that_is_no_json_object_is_a_run_that_did_not_end(tmp_path, text):
    (tmp_path / "summary.json").write_text(text)
    assert run_status(tmp_path) is None and not ended(run_status(tmp_path))
    (tmp_path / "summary.json").write_text('{"status": "finished"}')
    assert ended(run_status(tmp_path))
