"""A rival of one's own from a folder outside the repository, through the command line: docs/contributing.md's
plugin example (docs/examples/mine: one Python file, its preset, a one-rung study) copied to a temporary
folder, and the page's three lines run there as written by the installed console scripts: one run with the
method's own key set, a sweep of two jobs, the study. Nothing of the repository names the method."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import REPO, bash_blocks, error_lines, shell_calls, tool

EXAMPLE = REPO / "docs" / "examples" / "mine"
NAME = "warm_prefix"
QUIET = ["train.progress=false"]  # the progress bar off in a log; what runs is the page's line


def documented() -> dict[str, list[str]]:
    """The page's plugin lines, by tool: `mltrain`, `mltrain -m`, `mltrain-study`."""
    calls = [w for w in shell_calls(bash_blocks(REPO / "docs" / "contributing.md")) if f"plugins=[{NAME}]" in w]
    found = {("mltrain -m" if w[:2] == ["mltrain", "-m"] else w[0]): w for w in calls}
    assert sorted(found) == ["mltrain", "mltrain -m", "mltrain-study"], calls
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("outside") / "mine"
    shutil.copytree(EXAMPLE, where)
    assert REPO not in where.parents
    return where


def summaries(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("summary.json"))]


def test_nothing_in_the_package_or_its_presets_names_the_plugins_method():
    for path in [*(REPO / "mltrain").rglob("*.py"), *(REPO / "conf").rglob("*.yaml")]:
        assert NAME not in path.read_text(), path


def test_one_run_with_the_methods_own_key(folder):
    words = documented()["mltrain"]
    proc = tool("mltrain", *words[1:], *QUIET, "hydra.run.dir=one", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary,) = summaries(folder / "one")
    assert summary["run_kind"] == NAME and summary["status"] == "finished"
    config = yaml.safe_load((folder / "one" / ".hydra" / "config.yaml").read_text())
    assert config[NAME] == {"blocks": 1, "fraction": 0.5} and config["plugins"] == [NAME]
    rows = [json.loads(line) for line in (folder / "one" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert train[0]["blocks"] == 1.0 and train[-1]["blocks"] == 2.0  # the prefix alone first, then both blocks


def test_a_sweep_of_two_jobs(folder):
    words = documented()["mltrain -m"]
    proc = tool("mltrain", *words[1:], *QUIET, "hydra.sweep.dir=sweep", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent.name for p in (folder / "sweep").glob("*/summary.json"))
    assert jobs == [f"experiment={NAME},scale=smoke,{NAME}.fraction={f}" for f in ("0.25", "0.5")]
    assert {s["run_kind"] for s in summaries(folder / "sweep")} == {NAME}


def test_a_one_rung_study(folder):
    words = documented()["mltrain-study"]
    proc = tool("mltrain-study", *words[1:], "dir=study", cwd=folder)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = summaries(folder / "study")
    assert {s["run_kind"] for s in runs} == {"single", NAME} and all(s["status"] == "finished" for s in runs)
    assert len([s for s in runs if s["run_kind"] == NAME]) == 2  # tuned on a seed, evaluated on another
    assert (folder / "study" / "ladder.json").is_file()


def test_without_the_plugin_or_with_a_misspelt_one_it_is_one_line(folder):
    words = documented()["mltrain"]
    without = [w for w in words[1:] if not w.startswith("plugins=")]
    proc = tool("mltrain", *without, "hydra.run.dir=refused", cwd=folder)
    assert proc.returncode != 0 and "depth_method" in proc.stderr and NAME in proc.stderr
    assert "Traceback" not in proc.stderr and not (folder / "refused").exists()
    proc = tool("mltrain", "plugins=[warm_prefx]", *without, "hydra.run.dir=refused", cwd=folder)
    assert proc.returncode == 2 and error_lines(proc.stderr) == [
        f"mltrain: error: plugins: no module named 'warm_prefx' in the current folder ({folder}) or on the Python path"]
    assert not (folder / "refused").exists()


def test_the_help_lists_the_plugins_method_and_preset_named_on_the_line_or_in_the_environment(folder):
    line = tool("mltrain", f"plugins=[{NAME}]", "hydra.searchpath=[file://conf]", "--help", cwd=folder)
    env = tool("mltrain", "hydra.searchpath=[file://conf]", "--help", cwd=folder, env={"MLTRAIN_PLUGINS": NAME})
    for proc in (line, env):
        assert proc.returncode == 0, proc.stderr[-3000:]
        methods = next(s for s in proc.stdout.splitlines() if s.startswith("depth_method="))
        presets = next(s for s in proc.stdout.splitlines() if s.startswith("experiment: "))
        assert methods.endswith(f"|{NAME}") and NAME in presets.split(": ")[1].split(", ")
