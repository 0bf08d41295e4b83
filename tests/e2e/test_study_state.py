"""What a study reports follows from its config and the runs that config asks for: a grid changed
between invocations chooses and judges only on the current grid's runs (the others are named as left
out); `--status` does not believe a hand-edited selection.json and tells a running job from one to
resume; a full disk while the ladder plot is written is one line, the other reports kept. The
installed mltrain-study is run from outside the repository."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import made_once, made_smoke_study, refused, tool, tool_here

ONE_RUNG = ["study=smoke", "~ladder.d32"]


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory) -> Path:
    """The smoke study's first scale (its runs are the one-rung study's), its reports made by the installed
    mltrain-study without a sweep."""
    def make(folder: Path) -> None:
        smoke, code, _ = made_smoke_study(tmp_path_factory)
        assert code == 0
        shutil.copytree(smoke / "d16", folder / "study" / "d16", ignore=shutil.ignore_patterns(".mltrain.lock"))
        proc = tool_here("mltrain-study", *ONE_RUNG, f"dir={folder / 'study'}", cwd=folder)
        assert proc.returncode == 0 and "0 sweep(s) launched" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]

    return made_once(tmp_path_factory, "one_rung_study", make) / "study"  # once for the whole suite


def copy_of(study: Path, tmp_path: Path) -> Path:
    root = tmp_path / "study"
    shutil.copytree(study, root, ignore=shutil.ignore_patterns(".mltrain.lock"))
    return root


def values(path: Path, key: str = "optim.lr") -> set[str]:
    """Every value of `key` a report file names (in labels, settings, choices and run folders)."""
    return set(re.findall(re.escape(key) + r'(?:=|": ")([0-9][0-9.e+-]*)', path.read_text()))


def status(root: Path) -> str:
    proc = tool_here("mltrain-study", *ONE_RUNG, f"dir={root}", "--status", cwd=root.parent)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_a_changed_grid_chooses_and_judges_only_on_the_runs_it_asks_for(finished_study, tmp_path):
    root = copy_of(finished_study, tmp_path)
    grids = ["arms.multilevel.grid={optim.lr:[0.3,0.1]}",
             "arms.single.grid={optim.lr:[0.3,0.1],train.budget:[0.5,1.0,2.0]}"]
    proc = tool_here("mltrain-study", *ONE_RUNG, f"dir={root}", *grids, cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    said = [line for line in proc.stdout.splitlines() if "not asked for by this config" in line]
    assert len(said) == 1 and "optim.lr=0.03" in said[0]
    assert (root / "d16" / "tune" / "single" / "optim.lr=0.03,seed=0,train.budget=0.5").is_dir()  # kept on disk
    for report in (root / "d16" / "verdict" / "comparison.json", root / "d16" / "selection.json", root / "ladder.json"):
        assert values(report) <= {"0.3", "0.1"}, (report, values(report))  # nothing from the old grid's 0.03


@pytest.mark.slow
def test_status_does_not_believe_a_hand_edited_selection_and_the_next_run_chooses_again(finished_study, tmp_path):
    root = copy_of(finished_study, tmp_path)
    selection = root / "d16" / "selection.json"
    saved = json.loads(selection.read_text())
    chosen = saved["arms"]["multilevel"]["setting"]["optim.lr"]
    saved["arms"]["multilevel"]["setting"]["optim.lr"] = "0.03" if chosen == "0.3" else "0.3"
    selection.write_text(json.dumps(saved))
    out = status(root)
    row = next(line for line in out.splitlines() if " eval " in line and "multilevel" in line)
    assert "choose again" in row and "selection.json does not follow" in row
    single = next(line for line in out.splitlines() if " eval " in line and "single" in line)
    assert "6/6 finished" in single  # the record of an arm nobody edited is still believed
    proc = tool_here("mltrain-study", *ONE_RUNG, f"dir={root}", cwd=tmp_path)
    assert proc.returncode == 0 and "0 sweep(s) launched" in proc.stdout
    assert json.loads(selection.read_text())["arms"]["multilevel"]["setting"]["optim.lr"] == chosen
    assert "choose again" not in status(root)


@pytest.mark.slow
def test_status_says_a_finished_study_is_complete_and_what_it_took_and_names_what_a_copy_lacks(finished_study, tmp_path):
    root = copy_of(finished_study, tmp_path)
    out = status(root)
    ended = sum(1 for d in root.glob("d16/*/*/*") if (d / "summary.json").is_file())
    assert f"complete: all {ended} runs ended" in out and "not complete" not in out
    took = next(line for line in out.splitlines() if line.startswith("study smoke took "))
    assert f"took {ended} finished runs" in took and "FLOPs" in took and " plans " not in out
    shutil.rmtree(root / "d16" / "verdict")
    (root / "ladder.md").unlink()
    out = status(root)
    assert "not complete: d16's verdict, the ladder report not yet written" in out and " plans " in out


def _holding(lock: Path) -> subprocess.Popen:
    """Another process that holds `lock` as a live run holds its folder's lock."""
    code = ("import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.slow
def test_status_tells_a_running_job_and_a_live_study_from_ones_to_resume(finished_study, tmp_path):
    root = copy_of(finished_study, tmp_path)
    job = next((root / "d16" / "eval" / "multilevel").iterdir())
    (job / "summary.json").unlink()  # as a run that has not ended leaves it
    row = lambda out: next(line for line in out.splitlines() if " eval " in line and "multilevel" in line)  # noqa: E731
    assert "1 to resume" in row(status(root)) and "running now" not in status(root)
    run, study = _holding(job / ".mltrain.lock"), _holding(root / ".mltrain.lock")
    try:
        out = status(root)
        assert "1 running" in row(out) and "to resume" not in row(out)
        assert f"running now: process {study.pid}" in out.splitlines()[0]
    finally:
        for p in (run, study):
            p.kill()
            p.wait()
    assert "1 to resume" in row(status(root))


FULL_AT_THE_PLOT = """
import errno
from pathlib import Path
from matplotlib.figure import Figure
_savefig = Figure.savefig
def _full_at_the_plot(fig, path, *args, **kwargs):
    if Path(path).name == "ladder.png":
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    return _savefig(fig, path, *args, **kwargs)
Figure.savefig = _full_at_the_plot
"""


@pytest.mark.slow
def test_a_disk_that_fills_while_the_study_writes_its_plot_is_one_line(finished_study, tmp_path):
    root = copy_of(finished_study, tmp_path)
    (root / "ladder.png").unlink()
    before = (root / "ladder.json").read_bytes()
    proc = tool("mltrain-study", *ONE_RUNG, f"dir={root}", cwd=tmp_path, before=FULL_AT_THE_PLOT)
    line = refused(proc, "ladder.png")
    assert "disk" in line and "ladder.json and ladder.md were written" in line
    assert (root / "ladder.json").read_bytes() == before and (root / "ladder.md").exists()
    assert not (root / "ladder.png").exists() and not list(root.glob(".ladder.png.*"))  # nothing half-written
    assert tool_here("mltrain-study", *ONE_RUNG, f"dir={root}", cwd=tmp_path).returncode == 0
