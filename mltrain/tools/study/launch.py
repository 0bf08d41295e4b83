"""One sweep: `mltrain -m <overrides>` through Hydra, in this process.

Hydra's sweeper expands the line and its launcher runs the jobs: `basic` one after the other in this
process, `local` (joblib) in worker processes that stay alive from one sweep to the next, `slurm` as
cluster jobs. mltrain's own entry point runs it, exactly as the console command would, so a study's
runs are ordinary mltrain runs; running it here rather than in a new process per sweep saves the
start-up (imports, the first config composition) of every sweep, and keeps what a process loads once
(the tokenized corpus, see mltrain/data/loader.py) across the whole study.

While a study runs, what its sweeps print (mltrain's and Hydra's log lines, a failed job's error)
goes to the study's log file (`output_to`); the study prints its own progress lines on the console.
Logging, the environment and torch's thread count are put back as they were after each sweep.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Iterator, TextIO

from mltrain.interrupts import CtrlC
from mltrain.atomic import open_no_follow

# mltrain's exit statuses: a run stopped by SIGINT, SIGTERM, SIGUSR1 or SIGHUP (it wrote a checkpoint first)
STOPPED = (130, 143, 138, 129)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None and "OMP_NUM_THREADS" in env:
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))  # read only at import: set it for runs in this process
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if threads is not None:
            torch.set_num_threads(threads)


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """Hydra configures the root logger for every job; afterwards the study's logging is as before."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:] = handlers
        root.setLevel(level)


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[TextIO]:
    """While inside, everything this process and the workers it starts write to stdout and stderr goes
    to `log_path` (file descriptors 1 and 2, so a launcher's worker processes, which keep them for
    their whole life, write there too); yields the console's stdout for the study's own lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    log = open_no_follow(log_path, flags)  # never through a link (StorageError naming it)
    saved = [os.dup(1), os.dup(2)]
    console = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # Python's own streams too, where they are not file descriptors 1 and 2 (a test's captured output)
    text = os.fdopen(open_no_follow(log_path, flags), "a", encoding="utf-8", buffering=1)
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            yield console
    finally:
        text.close()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        console.close()


def multirun(overrides: list[str], env: dict[str, str]) -> int:
    """Run `mltrain -m <overrides>` here; returns its exit status: 0 every job ran, 1 some failed (each
    named in the log), one of STOPPED when a run was stopped by a signal (Ctrl-C)."""
    from mltrain.cli import train_main

    saved_argv = sys.argv
    sys.argv = ["mltrain", "-m", *overrides]
    with _environment(env), _logging_kept():
        print(f"$ mltrain -m {' '.join(overrides)}", flush=True)
        try:
            train_main()
            return 0
        except SystemExit as done:
            code = done.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        finally:
            sys.argv = saved_argv


def Interrupts() -> CtrlC:
    """While inside: Ctrl-C (SIGINT) stops the study, as Python's own handler would, and is also
    remembered (`requested`), so one that lands where Python cannot raise (a finaliser) still stops the
    study after the sweep. A run that is training handles it first (mltrain stops it after its step,
    with a checkpoint) and hands it on here."""
    return CtrlC(defer=False)
