"""The type check and the linter are part of CI: .ci/run runs both after the install and before the
tests, under `set -e` (either one's error fails CI), and the lint passes here as it must there. mypy
itself (~20 s) runs in .ci/run only; its settings and the modules it still skips are in pyproject.toml."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ci_lines() -> list[str]:
    return [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_mypy_and_ruff_after_the_install_and_before_the_tests_and_stops_on_an_error():
    lines = _ci_lines()
    assert "set -euo pipefail" in lines
    install = next(i for i, line in enumerate(lines) if "pip install" in line)
    tests = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert install < lines.index(".venv/bin/mypy") < tests
    assert install < lines.index(".venv/bin/ruff check .") < tests


def test_the_checkers_are_pinned_and_in_the_dev_extra():
    pinned = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^mypy==\S+$", pinned, re.M) and re.search(r"^ruff==\S+$", pinned, re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = " ".join(project["project"]["optional-dependencies"]["dev"])
    assert "mypy" in dev and "ruff" in dev
    assert project["tool"]["mypy"]["files"] == ["mltrain"]


def test_mypy_skips_no_module_of_the_package():
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    assert [o["module"] for o in overrides if o.get("ignore_errors")] == []
    # only libraries without type information (and the conf/ data package) are read as Any
    untyped = [m for o in overrides if o.get("ignore_missing_imports") for m in o["module"]]
    assert all(not m.startswith("mltrain.") or m == "mltrain.conf" for m in untyped)


def test_the_lint_passes():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
