"""mltrain-compare at the edges of its input: every bad file or argument is one clear line or a listed
exclusion (with the rest of the report computed without it), and an output folder it cannot write is one
line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import fake_run_dir, file_tree, linear_run, one_error, run_tool_here, unwritable_dir

from mltrain.tools.compare import main


BASE = "experiment=single"
ML = "experiment=multilevel"


def runs(root: Path) -> Path:
    """Three seeds of a single-level baseline and of a multilevel run that ends lower at half the FLOPs."""
    for s in (0, 1, 2):
        linear_run(root, f"b{s}", "single", BASE, s, flops=1e14, val=3.0 + 0.01 * s)
        linear_run(root, f"m{s}", "multilevel", ML, s, flops=5e13, val=2.9 + 0.01 * s)
    return root


def compare(capsys, *args) -> tuple[int, str, dict | None]:
    root = Path(args[0])
    rc = main([str(a) for a in args] + ["--out", str(root / "out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    path = root / "out" / "comparison.json"
    return rc, err, json.loads(path.read_text()) if rc == 0 else None


def one_line_error(rc: int, err: str, text: str) -> None:
    assert rc != 0 and len(err.strip().splitlines()) == 1 and text in err, err


def excluded(report: dict, name: str) -> dict:
    (e,) = [e for e in report["excluded"] if Path(e["run"]).name == name]
    return e


def baseline_numbers(report: dict) -> list:
    return [e["val"]["saving"] for e in report["vs_baseline"][0]["per_seed"]]


def test_a_byte_that_is_not_utf8_in_metrics_is_one_line(tmp_path, capsys):
    root = runs(tmp_path / "runs")
    with open(root / "m1" / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 99, "note": "\xff"}\n')
    rc, err, _ = compare(capsys, root)
    one_line_error(rc, err, f"unreadable metrics {root / 'm1' / 'metrics.jsonl'}")


def test_a_list_valued_seed_is_listed_and_left_out(tmp_path, capsys):
    root = runs(tmp_path / "runs")
    summary = json.loads((root / "m1" / "summary.json").read_text())
    (root / "m1" / "summary.json").write_text(json.dumps({**summary, "seed": [1, 2]}))
    rc, err, report = compare(capsys, root)
    assert rc == 0, err
    e = excluded(report, "m1")
    assert e["status"] == "bad summary" and "seed [1, 2]" in e["reason"]
    assert [s["seed"] for s in report["vs_baseline"][0]["per_seed"]] == [0, 2]


@pytest.mark.parametrize("dpi", ["0", "-5", "100000"])
def test_an_impossible_dpi_is_one_line(tmp_path, capsys, dpi):
    rc, err, _ = compare(capsys, runs(tmp_path / "runs"), "--dpi", dpi)
    one_line_error(rc, err, f"--dpi {dpi}: must be between")
    assert not (tmp_path / "runs" / "out").exists()  # nothing written before the check


def test_a_metrics_file_that_is_a_folder_or_a_pipe_is_listed(tmp_path, capsys):
    root = runs(tmp_path / "runs")
    os.remove(root / "m1" / "metrics.jsonl")
    (root / "m1" / "metrics.jsonl").mkdir()
    os.remove(root / "m2" / "metrics.jsonl")
    os.mkfifo(root / "m2" / "metrics.jsonl")  # opening it would wait for a writer for ever
    rc, err, report = compare(capsys, root)
    assert rc == 0, err
    assert excluded(report, "m1")["reason"] == "metrics.jsonl is a folder"
    assert excluded(report, "m2")["reason"] == "metrics.jsonl is not a regular file"
    assert [s["seed"] for s in report["vs_baseline"][0]["per_seed"]] == [0]
    assert "m1" in (root / "out" / "comparison.md").read_text().split("## Left out")[1]


def test_an_absurd_total_flops_is_cross_checked_and_never_enters_a_number(tmp_path, capsys):
    root = runs(tmp_path / "runs")
    rc, _, clean = compare(capsys, root)
    assert rc == 0
    for run in ("b1", "m2"):
        summary = json.loads((root / run / "summary.json").read_text())
        (root / run / "summary.json").write_text(json.dumps({**summary, "total_flops": 1e308}))
    rc, err, report = compare(capsys, root)
    assert rc == 0, err
    for run in ("b1", "m2"):
        e = excluded(report, run)
        assert e["status"] == "bad summary" and "total_flops 1e+308" in e["reason"] and "metrics.jsonl" in e["reason"]
    kept = {s["seed"]: s["val"]["saving"] for s in clean["vs_baseline"][0]["per_seed"]}
    now = {s["seed"]: s["val"]["saving"] for s in report["vs_baseline"][0]["per_seed"]}
    assert now == {0: kept[0], 1: pytest.approx(kept[1], abs=0.05)}  # seed 1 now compared with the baseline's mean
    assert all(c["runs"][0]["total_flops"] < 1e15 for c in report["configurations"])


def test_bad_tune_keys_are_one_line(tmp_path, capsys):
    root = runs(tmp_path / "runs")
    for key in ("optim.lr=0.1", "", ".lr"):
        rc, err, _ = compare(capsys, root, "--tune", key)
        one_line_error(rc, err, "--tune")


def test_when_every_run_is_left_out_the_line_says_why(tmp_path, capsys):
    root = tmp_path / "runs"
    linear_run(root, "b0", "single", BASE, 0, flops=1e14, val=3.0, nan_at=2)
    linear_run(root, "m0", "multilevel", ML, 0, flops=1e14, val=2.0, summary={"status": "interrupted"})
    rc, err, _ = compare(capsys, root)
    lines = [line for line in err.splitlines() if line.startswith("mltrain-compare: error:")]
    assert rc == 1 and len(lines) == 1 and "no usable run" in lines[0] and "diverged" in lines[0]


def test_compare_into_a_read_only_out_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    fake_run_dir(runs, "a", "single", "default")
    fake_run_dir(runs, "b", "multilevel", "coarsening=evenodd")
    before = file_tree(runs)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(run_tool_here("mltrain-compare", str(runs), "--out", f"{blocker}/report", cwd=tmp_path), "mltrain-compare")
    assert str(blocker) in line
    ro = unwritable_dir(tmp_path)
    line = one_error(run_tool_here("mltrain-compare", str(runs), "--out", f"{ro}/report", cwd=tmp_path), "mltrain-compare")
    assert str(ro) in line
    assert file_tree(runs) == before
