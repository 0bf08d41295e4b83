"""A study that outlives its machine: stopped part way by its time window (exit 0, one line), its records
folder committed to git and cloned elsewhere, finished there without running a finished run again, to the
verdict of the same study run in one go, figure for figure; a record whose corpus or torch differs from
the rest is refused in one line naming it, unless the study accepts the change (its reports say so)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import TOOL_SMOKE, made_once, made_smoke_study, refused, run_main, smoke_run, tool_here

from mltrain.tools.study import progress, stages, window

ONE_RUNG = ["study=smoke", "~ladder.d32"]


@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory):
    return made_smoke_study(tmp_path_factory)


def reports(root: Path) -> dict:
    """What the ladder says per scale and arm, and every scale's selection (what a resume must reproduce)."""
    saved = json.loads((root / "ladder.json").read_text())
    keep = ("arm", "found", "selected", "selected_by_budget", "final_val_loss", "multiplier", "eval_seeds")
    return {"scales": [[{k: a.get(k) for k in keep} for a in s["arms"]] for s in saved["scales"]],
            "selection": {p.parent.name: json.loads(p.read_text()) for p in root.glob("*/selection.json")}}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def ended_runs(root: Path) -> dict[str, bytes]:
    return {str(d.relative_to(root)): (d / "summary.json").read_bytes()
            for d in root.glob("*/*/*/*") if progress.ended(progress.run_status(d))}


def test_a_study_stopped_by_its_window_is_finished_from_a_clone_to_the_same_verdict(smoke_study, tmp_path, monkeypatch):
    first = tmp_path / "here" / "results" / "smoke"
    argv = [*ONE_RUNG, f"dir={first}"]
    clock = [0.0]
    monkeypatch.setattr(window, "now", lambda: __import__("time").time() + clock[0])
    real_ended, seen = stages.Progress.ended, []

    def the_window_ends_after_the_4th_run(self, run, summary, cost):
        real_ended(self, run, summary, cost)
        seen.append(run)
        if len(seen) == 4:
            clock[0] = 7200.0  # two hours on: the window of one hour has ended

    monkeypatch.setattr(stages.Progress, "ended", the_window_ends_after_the_4th_run)
    code, out, _ = run_main(*argv, "--for", "1h")
    assert code == 0, out
    last = out.splitlines()[-1]
    m = re.fullmatch(r"mltrain-study: the time window \(--for 1h\) ended: (\d+)/16 runs done, (\S+)/(\S+) FLOPs done, "
                     r"(about .+ left at this machine's rate|no estimate .+); continue with: (.+)", last)
    assert m, last
    done = ended_runs(first)
    assert int(m[1]) == len(done) and 4 <= len(done) < 16 and 0 < float(m[2]) < float(m[3])
    assert m[5] == shlex.join(["mltrain-study", *argv])
    monkeypatch.setattr(stages.Progress, "ended", real_ended)

    # the records folder, committed in a throwaway repository and cloned on "another machine"
    git("init", "-q", ".", cwd=tmp_path / "here")
    git("add", "results/smoke", cwd=tmp_path / "here")
    git("commit", "-qm", "records", cwd=tmp_path / "here")
    tracked = git("ls-files", cwd=tmp_path / "here").split()
    assert tracked and not [p for p in tracked if re.search(r"safetensors|checkpoints/|\.log$|\.lock$|hydra\.yaml|"
                                                            r"multirun\.yaml|model\.json", p)]
    unfinished = {str(d.relative_to(first)) for d in first.glob("*/*/*/*") if d.is_dir()} - set(done)
    assert not [p for p in tracked if any(p.startswith(f"results/smoke/{u}/") for u in unfinished)]
    git("clone", "-q", str(tmp_path / "here"), str(tmp_path / "there"), cwd=tmp_path)
    second = tmp_path / "there" / "results" / "smoke"
    assert ended_runs(second) == done

    code, out, _ = run_main(*ONE_RUNG, f"dir={second}")
    assert code == 0, out
    ran = [line.split("]", 1)[1].split(":")[0].strip() for line in out.splitlines() if line.startswith("[")]
    assert len(ran) == 16 - len(done) and not {r.removeprefix("d16/") for r in ran} & {d.removeprefix("d16/") for d in done}
    assert {k: v for k, v in ended_runs(second).items() if k in done} == done  # the finished ones untouched
    again, whole = reports(second), reports(smoke_study[0])
    assert again["scales"] == whole["scales"][:1] and again["selection"]["d16"] == whole["selection"]["d16"]


def _edit(run: Path, change) -> None:
    summary = json.loads((run / "summary.json").read_text())
    change(summary)
    (run / "summary.json").write_text(json.dumps(summary))


def test_a_record_made_with_another_corpus_or_torch_is_refused_unless_accepted(smoke_study, tmp_path, capsys):
    root = tmp_path / "study"
    shutil.copytree(smoke_study[0] / "d16", root / "d16", ignore=shutil.ignore_patterns(".mltrain.lock"))
    argv = [*ONE_RUNG, f"dir={root}"]
    runs = sorted(d for d in root.glob("d16/*/*/*") if (d / "summary.json").exists())
    for run in runs:  # the corpus's sha256, as the data loader records it
        _edit(run, lambda s: s.update(corpus={**s.get("corpus", {}), "sha256": "a" * 64}))
    _edit(runs[3], lambda s: s["corpus"].update(sha256="b" * 64))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    code, _, err = run_main(*argv, capsys=capsys)
    line = err.strip()
    assert code == 2 and len(line.splitlines()) == 1, err
    assert (f"{runs[3].relative_to(root)} was made with corpus {'b' * 16}…; the study's other runs have {'a' * 16}…"
            in line and "allow_env_change=[corpus]" in line)
    _edit(runs[3], lambda s: s["corpus"].update(sha256="a" * 64))
    _edit(runs[5], lambda s: s["environment"].update(torch="0.0.1"))
    code, _, err = run_main(*argv, capsys=capsys)
    assert code == 2 and f"{runs[5].relative_to(root)} was made with torch 0.0.1; here it is " in err, err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p != runs[3] / "summary.json"
            and p != runs[5] / "summary.json"} == {p: b for p, b in before.items()
                                                   if p not in (runs[3] / "summary.json", runs[5] / "summary.json")}

    code, out, _ = run_main(*argv, "allow_env_change=[torch]")
    assert code == 0 and "0 sweep(s) launched" in out, out
    assert "runs made in another environment were accepted (allow_env_change): torch (0.0.1, " in out
    assert "Runs made in another environment were accepted" in (root / "ladder.md").read_text()
    assert json.loads((root / "environment.json").read_text())["accepted_changes"]["torch"][0] == "0.0.1"


def test_a_run_resumed_where_torch_differs_is_refused_unless_the_change_is_accepted(tmp_path, tmp_path_factory):
    run = made_once(tmp_path_factory, "smoke_run", smoke_run) / "run"  # the suite's finished smoke run, a copy
    summary = json.loads((run / "summary.json").read_text())
    assert summary["environment"]["torch"] and summary["environment"]["code"]
    summary.update(status="interrupted")  # stopped at its last checkpoint, on a machine with another torch
    summary["environment"]["torch"] = "0.0.1"
    (run / "summary.json").write_text(json.dumps(summary))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".mltrain.lock"}
    resume = [*TOOL_SMOKE, "train.resume=true", f"hydra.run.dir={run}"]
    line = refused(tool_here("mltrain", *resume, cwd=tmp_path), f"{run} holds a run made with torch 0.0.1; here it is ")
    assert "MLTRAIN_ALLOW_ENV_CHANGE=torch" in line
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".mltrain.lock"} == before
    proc = tool_here("mltrain", *resume, cwd=tmp_path, env={"MLTRAIN_ALLOW_ENV_CHANGE": "torch"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


def test_a_window_that_ends_before_the_first_run_ends_stops_the_installed_study_with_its_line(tmp_path):
    """As a person runs it: the installed mltrain-study, a one-second window (over while the study checks
    its settings, or while its first run trains): exit 0, the one line, and what it says is on disk."""
    root = tmp_path / "study"
    proc = tool_here("mltrain-study", *ONE_RUNG, f"dir={root}", "--for", "1s", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.fullmatch(r"mltrain-study: the time window \(--for 1s\) ended: (\d+)/16 runs done, .* FLOPs done, .*; "
                     r"continue with: (.+)", proc.stdout.strip().splitlines()[-1])
    assert m and m[2] == shlex.join(["mltrain-study", *ONE_RUNG, f"dir={root}"]), proc.stdout[-3000:]
    assert int(m[1]) == len(ended_runs(root)) < 16
    assert (root / ".gitignore").exists() and (root / "environment.json").exists()
