"""The in-process twin of the tools (helpers.in_process, behind cli_here, tool_here, run_tool_here and
multirun_here): what it returns is what the console script's process gives, what a process's end
discards is put back, and a run that leaves state behind fails the test, naming what it left."""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings

import pytest

import mltrain.console
from helpers import TOOL_SMOKE, in_process, tool, tool_here


def test_a_refusal_in_process_is_the_processs_refusal_line_for_line(tmp_path):
    args = (*TOOL_SMOKE, "train.max_steps=-3", f"hydra.run.dir={tmp_path / 'run'}")
    alone, here = tool("mltrain", *args, cwd=tmp_path), tool_here("mltrain", *args, cwd=tmp_path)
    assert (here.returncode, here.stdout, here.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert here.returncode == 2 and "train.max_steps" in here.stderr


def test_what_a_process_end_discards_is_put_back(tmp_path, monkeypatch):
    before = (os.getcwd(), list(sys.argv), dict(os.environ), list(logging.getLogger().handlers), logging.raiseExceptions)
    seen = {}

    def main():
        seen.update(cwd=os.getcwd(), argv=list(sys.argv), env=os.environ.get("ONLY_HERE"), home=os.environ.get("HOME"))
        os.chdir("/")
        os.environ["MLTRAIN_PLUGINS"] = "left_behind"
        logging.getLogger().addHandler(logging.FileHandler(tmp_path / "cli.log"))
        logging.raiseExceptions = False
        print("to stdout")
        print("to stderr", file=sys.stderr)
        warnings.warn("a warning, as a process prints it", UserWarning, stacklevel=1)
        sys.exit(3)

    monkeypatch.setattr(mltrain.console, "train_main", main)
    proc = in_process("mltrain", ["a=1"], tmp_path, {"ONLY_HERE": "yes"})
    assert (proc.returncode, proc.stdout) == (3, "to stdout\n")
    assert "to stderr" in proc.stderr and "UserWarning: a warning, as a process prints it" in proc.stderr
    assert seen == {"cwd": str(tmp_path), "argv": ["mltrain", "a=1"], "env": "yes", "home": None}
    assert (os.getcwd(), sys.argv, dict(os.environ), logging.getLogger().handlers, logging.raiseExceptions) == before


@pytest.mark.parametrize("leave, named", [
    (lambda: signal.signal(signal.SIGTERM, lambda *a: None), "signal handler SIGTERM"),
    (lambda: sys.path.insert(0, "/nowhere"), "sys.path"),
    (lambda: warnings.simplefilter("error"), "warnings.filters"),
])
def test_a_run_that_leaves_state_behind_fails_naming_it(tmp_path, monkeypatch, leave, named):
    saved = signal.getsignal(signal.SIGTERM), list(sys.path)
    monkeypatch.setattr(mltrain.console, "train_main", leave)
    try:
        with pytest.raises(AssertionError, match=f"left these changed: .*{named}"):
            in_process("mltrain", [], tmp_path, dict(os.environ))
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        sys.path[:] = saved[1]


def test_an_exception_that_escapes_is_a_traceback_and_status_1(tmp_path, monkeypatch):
    monkeypatch.setattr(mltrain.console, "train_main", lambda: 1 / 0)
    proc = in_process("mltrain", [], tmp_path, dict(os.environ))
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ZeroDivisionError" in proc.stderr
