"""A study's time window (--for, --until): what it parses and refuses, how many runs it lets start, and the
command that continues a stopped study; a records folder's .gitignore and the environment a continuation
must equal (mltrain/tools/study/window.py, records.py, mltrain/runs/environment.py)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess

import pytest
from helpers import run_main

from mltrain.core.errors import ConfigError
from mltrain.runs import environment
from mltrain.tools.study import records, window
from mltrain.tools.study.window import Window, parse_duration, parse_until, without_window


@pytest.mark.parametrize("text, seconds", [("2h30m", 9000), ("90m", 5400), ("45s", 45), ("1.5h", 5400),
                                           ("1d", 86400), ("1h0m30s", 3630), ("10min", 600)])
def test_a_duration_reads_as_its_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "90", "h", "0s", "-5m", "1h 30m"])
def test_a_malformed_or_empty_duration_is_refused_naming_it(text):
    with pytest.raises(ConfigError, match="--for"):
        parse_duration(text)


def test_until_a_time_of_day_is_its_next_occurrence_and_a_past_date_is_refused():
    start = dt.datetime(2026, 12, 6, 23, 0).astimezone().timestamp()
    assert parse_until("23:30", start) - start == 1800
    assert parse_until("06:00", start) - start == 7 * 3600  # tomorrow's
    assert parse_until("2026-12-07T01:00", start) - start == 2 * 3600
    for bad, says in (("25:00", "not a time of day"), ("soon", "not a time"), ("2026-12-06T22:00", "has passed")):
        with pytest.raises(ConfigError, match=says):
            parse_until(bad, start)
    with pytest.raises(ConfigError, match="give one window"):
        Window.from_args("1h", "18:00", start)


def test_runs_are_launched_while_their_estimated_end_is_inside_the_window(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(window, "now", lambda: clock[0])
    w = Window.from_args("100s", None)
    w.parallel = 2
    assert w.fitting([1e9] * 5) == 2  # nothing measured yet: one run per worker measures the rate
    w.measured(12.0, [(10.0, 1e9), (10.0, 1e9)])  # 10 s per 1e9 FLOPs a run, 2 s start-up a batch
    assert w.rate == 1e-8 and w.overhead == 2.0
    assert w.estimate(4e9) == 2.0 + 40 / 2
    assert w.fitting([1e9] * 30) == 19  # 2 s + 19 runs x 10 s / 2 workers = 97 s <= 100 s; a 20th ends at 102 s
    clock[0] += 60
    assert w.fitting([1e9] * 30) == 7
    clock[0] += 40
    assert w.closed() and w.fitting([1.0]) == 0


def test_the_command_that_continues_leaves_the_window_out():
    argv = ["study=smoke", "--for", "2h", "dir=x", "--until=18:00", "--status"]
    assert without_window(argv) == ["study=smoke", "dir=x", "--status"]


def test_a_bad_window_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    for args, says in ((["--for", "2x"], "--for '2x': not a duration"),
                       (["--until", "2000-01-01T00:00"], "has passed already"),
                       (["--for", "1h", "--until", "18:00"], "give one window")):
        code, _, err = run_main("study=smoke", f"dir={tmp_path / 'study'}", *args, capsys=capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and says in lines[0], err
    assert not (tmp_path / "study").exists()


# ---------------------------------------------------------------------------------------------
# records


def _run(folder, summary: dict) -> None:
    folder.mkdir(parents=True)
    for name in ("run.json", "metrics.jsonl"):
        (folder / name).write_text("{}\n")
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "cli.log").write_text("log\n")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "step-1.pt").write_bytes(b"state")
    (folder / ".hydra").mkdir()
    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        (folder / ".hydra" / name).write_text("a: 1\n")


def test_git_add_of_a_records_folder_takes_the_records_of_ended_runs_only(tmp_path):
    root = tmp_path / "results" / "study"
    _run(root / "d16" / "tune" / "single" / "optim.lr=0.3,seed=0", {"status": "finished"})
    _run(root / "d16" / "tune" / "single" / "optim.lr=[1,2]#x,seed=1", {"status": "finished"})
    _run(root / "d16" / "eval" / "single" / "optim.lr=0.3,seed=1", {"status": "interrupted"})
    for name in ("study.json", "study.log", ".mltrain.lock", "ladder.md", "environment.json"):
        (root / name).write_text("x\n")
    (root / "d16" / "selection.json").write_text("{}")
    (root / "d16" / "tune" / "single" / "multirun.yaml").write_text("a: 1\n")
    records.write_gitignore(root)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "results/study"], check=True)
    added = subprocess.run(["git", "-C", str(tmp_path), "diff", "--cached", "--name-only"], check=True,
                           capture_output=True, text=True).stdout.split()
    kept = ["run.json", "summary.json", "metrics.jsonl", ".hydra/config.yaml", ".hydra/overrides.yaml"]
    runs = ["d16/tune/single/optim.lr=0.3,seed=0", "d16/tune/single/optim.lr=[1,2]#x,seed=1"]
    assert sorted(added) == sorted(["results/study/.gitignore", "results/study/study.json",
                                    "results/study/environment.json", "results/study/ladder.md",
                                    "results/study/d16/selection.json",
                                    *(f"results/study/{r}/{k}" for r in runs for k in kept)])


def _summary(**env) -> dict:
    here = {"code": environment.code_digest(), "python": "3.x", "threads": 1, "device": "cpu", "machine_id": "m1"}
    return {"status": "finished", "environment": {**here, **env}, "corpus": {"sha256": "c0ffee"},
            "held_out": {"fingerprint": "f00d", "sequences": 8, "tokens": 128}}


def test_the_values_a_continuation_must_equal_are_read_from_a_summary():
    values = environment.recorded(_summary(torch="2.13.0"))
    assert values["torch"] == "2.13.0" and values["corpus"] == "c0ffee" and values["held_out"] == "f00d"
    assert "machine_id" not in values and set(values) <= set(environment.MUST_EQUAL)
    assert environment.recorded({"status": "finished"}) == {}  # an older run records none: nothing to compare


def test_runs_about_to_start_are_left_out_of_the_records_before_they_exist(tmp_path):
    """A commit while a batch trains takes none of its runs: they are listed before they are written."""
    root = tmp_path / "results" / "study"
    _run(root / "d16" / "tune" / "single" / "optim.lr=0.3,seed=0", {"status": "finished"})
    starting = root / "d16" / "eval" / "single" / "optim.lr=0.3,seed=1"
    records.write_gitignore(root, [starting])
    _run(starting, None)  # it starts writing its files: no summary yet
    (starting / "metrics.jsonl").write_text("{}\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "results/study"], check=True)
    added = subprocess.run(["git", "-C", str(tmp_path), "diff", "--cached", "--name-only"], check=True,
                           capture_output=True, text=True).stdout.split()
    assert any("seed=0" in a for a in added) and not any("seed=1" in a for a in added)
