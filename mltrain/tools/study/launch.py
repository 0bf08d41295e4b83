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
it to stop. SIGTERM, SIGHUP and SIGUSR1 sent to the study while a sweep runs are handed on the same way,
and the study then stops too (`multirun` returns 128 + the signal's number) whatever the sweeps'
process made of it: one still starting, before mltrain's handlers exist, is killed by it, and that is
a stop, not failed runs.

The study owns the sweeps' process: it dies with the study, however the study ends. The process
watches its parent (`owned_by_study`, a thread started before anything else): when the study is gone
(`kill -9` included), it sends SIGTERM to its whole process group (each run stops after its step, with a
checkpoint; a process still starting dies) and SIGKILL to whatever is left GRACE_S later. It also holds
the study's folder lock (`rundir.claim`'s flock, handed down as an open descriptor), so the documented
resume, the same command, is refused in one line while any process of a killed study's sweep still lives.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TextIO

from mltrain.core.interrupts import STOPPED, CtrlC
from mltrain.core.atomic import open_no_follow
from mltrain.runs import rundir

# `mltrain -m <overrides>` for each sweep (one JSON list of overrides per argument), run by this Python;
# the process first makes sure it dies with the study
ENTRY = ("import json, sys; from mltrain.tools.study.launch import owned_by_study; owned_by_study(); "
         "from mltrain.console import sweeps_main; sweeps_main([json.loads(a) for a in sys.argv[1:]])")
HANDED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
STUDY_PID_ENV = "MLTRAIN_STUDY_PID"  # the study's pid, in the sweeps' process: its parent to watch
WATCH_S = 0.2  # how often the sweeps' process looks at its parent
GRACE_S = 30.0  # after SIGTERM: time for each run's step and checkpoint before SIGKILL (runs/sweep.py's too)


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


class _Handoff:
    """While inside: SIGTERM, SIGHUP and SIGUSR1 sent to the study are remembered (the first: `signum`)
    and handed on to the sweep's process group once it exists (at once, or as soon as it starts)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.signum: Optional[int] = None
        self._saved: dict = {}

    def __enter__(self) -> "_Handoff":
        if threading.current_thread() is threading.main_thread():
            self._saved = {s: signal.signal(s, self._handle) for s in HANDED_ON}
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = self.signum or signum
        if self.proc is not None:
            _hand_on(self.proc, signum)

    def started(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.signum is not None:  # it came while the process was being started
            _hand_on(proc, self.signum)


def _hand_on(proc: subprocess.Popen, signum: int) -> None:
    """The signal to the sweep's whole process group (the run and its launcher's workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


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
    by a signal (Ctrl-C; the later sweeps were not started), and 128 + the signal's number whenever the
    study itself got SIGTERM, SIGHUP or SIGUSR1 meanwhile (the sweep stopped, or was killed starting).
    `stop`: see `_wait`."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = sys.stdout  # the study's log inside output_to
    child_env = {**os.environ, **{k: str(v) for k, v in env.items()}, STUDY_PID_ENV: str(os.getpid())}
    with _Handoff() as handoff:
        if handoff.signum is not None:
            return 128 + handoff.signum
        proc = subprocess.Popen([sys.executable, "-c", ENTRY, *map(json.dumps, sweeps)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, env=child_env, process_group=0,
                                pass_fds=rundir.held_fds())  # the study's folder stays locked while it lives
        handoff.started(proc)
        rundir.add_holder(proc.pid)
        code = _wait(proc, stop)
    return 128 + handoff.signum if handoff.signum is not None else code


def owned_by_study() -> None:
    """In the sweeps' process, first of all: when the study that started it (STUDY_PID_ENV) is gone, or
    already was, stop this process group (`_orphaned`). Nothing outside a study's sweeps."""
    parent = os.environ.pop(STUDY_PID_ENV, "")
    if not parent.isdigit():
        return
    if os.getppid() != int(parent):
        _orphaned()  # the study died before this process could watch it
    threading.Thread(target=_watch_study, args=(int(parent),), name="mltrain-study-watch", daemon=True).start()


def _watch_study(parent: int) -> None:
    while os.getppid() == parent:  # reparented when the study dies, however it dies
        time.sleep(WATCH_S)
    _orphaned()


def _orphaned() -> None:
    """SIGTERM to this process group (the run finishes its step and writes a checkpoint, the launcher's
    workers stop theirs; a process still starting dies), then SIGKILL to what is left after GRACE_S."""
    group = os.getpgrp()
    if group != os.getpid():  # not a group of its own (not started by multirun): this process only
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE_S)
        os._exit(128 + signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGTERM)
    time.sleep(GRACE_S)
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)


class Stopped(KeyboardInterrupt):
    """The study stops because a sweep was stopped by a signal: `status` is its exit status (130 Ctrl-C,
    143 SIGTERM, 129 SIGHUP, 138 SIGUSR1)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def Interrupts() -> CtrlC:
    """While inside: Ctrl-C (SIGINT) stops the study, as Python's own handler would, and is also
    remembered (`requested`), so one that lands where Python cannot raise (a finaliser) still stops the
    study after the sweep. A sweep that is running gets it first (`multirun`: mltrain stops each run
    after its step, with a checkpoint) and the study stops when the sweep has."""
    return CtrlC(defer=False)
