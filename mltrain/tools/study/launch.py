"""The sweeps of one stage: `mltrain -m <overrides>` for each, one after another in one process of
their own, the same Python environment's (mltrain.console.sweeps_main).

Hydra's sweeper, in that process, expands each line and its launcher runs the jobs: `basic` one after
the other there, `local` (joblib) in worker processes it starts, `slurm` as cluster jobs. Each sweep is
the console command's own run of that line (mltrain.console.train_main: its own composition, run guard
and multirun.yaml), so a study's runs are ordinary mltrain runs, and nothing of a run (its config, its
signal handlers, torch's state) is in the study's process. One process for a stage's sweeps pays
Python's, torch's and Hydra's start-up once (about 4 s a process), not once per arm.

While a study runs, what its sweeps print (mltrain's and Hydra's log lines, a failed job's error)
goes to the study's log file (`output_to`); the study prints its own progress lines on the console.

Signals: the sweeps' process gets a process group of its own, so a Ctrl-C at the terminal reaches the
study only; the study hands it on once to the whole group (the run and any launcher workers: mltrain
stops each run after its step, with a checkpoint, and the later sweeps are not started) and waits for
it to stop. SIGTERM, SIGHUP and SIGUSR1 sent to the study while a sweep runs are handed on the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TextIO

from mltrain.interrupts import STOPPED, CtrlC
from mltrain.atomic import open_no_follow

# `mltrain -m <overrides>` for each sweep (one JSON list of overrides per argument), run by this Python
ENTRY = "import json, sys; from mltrain.console import sweeps_main; sweeps_main([json.loads(a) for a in sys.argv[1:]])"
HANDED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[TextIO]:
    """While inside, what the sweeps print and what this process prints through Python's streams go to
    `log_path`, opened for appending and never through a link (StorageError naming it); yields the
    console's stdout for the study's own lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    console = sys.stdout
    console.flush()
    text = os.fdopen(open_no_follow(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8",
                     buffering=1)
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            yield console
    finally:
        text.close()


def _hand_on(proc: subprocess.Popen, signum: int) -> None:
    """The signal to the sweep's whole process group (the run and its launcher's workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


@contextlib.contextmanager
def _handing_on(proc: subprocess.Popen) -> Iterator[None]:
    """While inside, SIGTERM, SIGHUP and SIGUSR1 sent to the study go to the sweep's process group."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, lambda signum, _frame: _hand_on(proc, signum)) for s in HANDED_ON}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _wait(proc: subprocess.Popen, stop: Optional[Callable[[], bool]] = None) -> int:
    """The sweep's exit status; a Ctrl-C meanwhile is handed on and the sweep waited for (130 at least).
    `stop` (a study's time window) is asked every half second: once it says so, the sweep gets a Ctrl-C
    as from the terminal (its runs stop after their step, with a checkpoint) and is waited for."""
    interrupted = False
    while True:
        try:
            try:
                code = proc.wait(timeout=None if stop is None else 0.5)
            except subprocess.TimeoutExpired:
                if stop is not None and stop():
                    stop = None
                    _hand_on(proc, signal.SIGINT)
                continue
            break
        except KeyboardInterrupt:
            interrupted = True
            _hand_on(proc, signal.SIGINT)
    return code if code in STOPPED or not interrupted else 130


def multirun(sweeps: list[list[str]], env: dict[str, Any], stop: Optional[Callable[[], bool]] = None) -> int:
    """Run `mltrain -m <overrides>` for each of `sweeps` in turn, in one new process with `env` added to
    this one's environment (each line is printed to the log before its sweep starts); returns its exit
    status: 0 every job ran, 1 some failed (each named in the log), one of STOPPED when a run was stopped
    by a signal (Ctrl-C; the later sweeps were not started). `stop`: see `_wait`."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = sys.stdout  # the study's log inside output_to
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *map(json.dumps, sweeps)], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **{k: str(v) for k, v in env.items()}},
                            process_group=0)
    with _handing_on(proc):
        return _wait(proc, stop)


def Interrupts() -> CtrlC:
    """While inside: Ctrl-C (SIGINT) stops the study, as Python's own handler would, and is also
    remembered (`requested`), so one that lands where Python cannot raise (a finaliser) still stops the
    study after the sweep. A sweep that is running gets it first (`multirun`: mltrain stops each run
    after its step, with a checkpoint) and the study stops when the sweep has."""
    return CtrlC(defer=False)
