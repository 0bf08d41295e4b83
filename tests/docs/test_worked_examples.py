"""The worked examples of docs/contributing.md run as a reader runs them: `python FILE` from a fresh
folder (the files an example writes go there), with the package as installed, each proving itself with
its own asserts: exit status 0. Each is short, and the contributing page links every one of them."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

EXAMPLES = REPO / "docs" / "examples"
CONTRIBUTING = REPO / "docs" / "contributing.md"
# The page's four examples: each must exist.
NAMED = ["add_scheme.py", "add_method.py", "add_metric.py", "add_study_axis.py"]
ALL = sorted(set(NAMED) | {p.name for p in EXAMPLES.glob("*.py")})
MAX_LINES = 80  # a worked example reads in one screen


def example(name: str) -> Path:
    path = EXAMPLES / name
    assert path.is_file(), f"docs/contributing.md's example docs/examples/{name} is missing"
    return path


@pytest.mark.parametrize("name", ALL)
def test_worked_example_runs_from_a_fresh_folder(name, tmp_path):
    path = example(name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"python docs/examples/{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"docs/examples/{name} printed nothing: a worked example shows what it did"


@pytest.mark.parametrize("name", ALL)
def test_worked_example_is_short(name):
    lines = example(name).read_text().splitlines()
    assert len(lines) < MAX_LINES, f"docs/examples/{name} has {len(lines)} lines: a worked example is under {MAX_LINES}"


def test_contributing_links_every_example():
    links = set(re.findall(r"\]\((examples/[\w.]+\.py)\)", CONTRIBUTING.read_text()))
    missing = [name for name in ALL if f"examples/{name}" not in links]
    assert not missing, f"docs/contributing.md does not link {', '.join(missing)}"
