"""The console entry points (`mltrain`, `mltrain-compare`, `mltrain-prepare`, `mltrain-sample`,
`mltrain-export`, `mltrain-study`).

Each imports its tool only when called, and this module imports nothing of mltrain at all, so a tool
pays only for what it uses: `mltrain-compare` starts without torch or wandb. Training's own entry point
(Hydra and the run guard) is mltrain/cli.py, imported here when `mltrain` starts.

Every entry point runs inside `_stopped_by_ctrl_c`: a Ctrl-C that no tool handles itself (one in the
first second, while torch or Hydra imports) is one `<tool>: interrupted:` line and exit status 130, not a
traceback. `mltrain` calls its Hydra task straight from here, inside blocks rather than wrappers: the
stack from this entry point to the optimizer step holds as few of mltrain's frames as it can
(tests/training/test_step_frames.py counts them).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator, NoReturn

STOPPED = 130  # 128 + SIGINT


@contextlib.contextmanager
def _stopped_by_ctrl_c(prog: str) -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        try:
            print(f"{prog}: interrupted: stopped by Ctrl-C before it had started or after it had ended; "
                  f"nothing was left half-written", file=sys.stderr, flush=True)
        except (OSError, ValueError, KeyboardInterrupt):
            pass
        sys.exit(STOPPED)


def _entry(prog: str, main: Callable[[], object]) -> NoReturn:
    with _stopped_by_ctrl_c(prog):
        code = main()
    sys.exit(code if code is None or isinstance(code, (int, str)) else str(code))


def train_main() -> NoReturn:
    with _stopped_by_ctrl_c("mltrain"):
        from mltrain import cli

        with cli.launch():  # the ranks joined, Hydra's errors in one line, the process group shut down
            cli.hydra_task()
    sys.exit(0)


def sweeps_main(sweeps: list[list[str]]) -> NoReturn:
    """`mltrain -m <overrides>` for each of `sweeps` in turn, in this one process, each line printed first
    (mltrain-study's sweeps of one stage: one start-up for all of them). Each is the command's own run of
    that line, read by Hydra from sys.argv as it reads a command line. A sweep stopped by a signal ends
    the process with its status, the later ones not started; else the status is 1 when any sweep failed."""
    from mltrain.core.interrupts import STOPPED
    from mltrain.runs.provenance import redact_argv

    failed = False
    with _stopped_by_ctrl_c("mltrain"):  # a Ctrl-C between two sweeps: one line, status 130
        for overrides in sweeps:
            print(f"$ mltrain -m {' '.join(redact_argv(overrides))}", flush=True)  # the study's log: no secret
            sys.argv = ["mltrain", "-m", *overrides]
            status = 0
            try:
                train_main()
            except SystemExit as end:
                status = end.code if isinstance(end.code, int) else int(end.code is not None)
            sys.stdout.flush()
            sys.stderr.flush()
            if status in STOPPED:
                sys.exit(status)
            failed = failed or status != 0
    sys.exit(1 if failed else 0)


def compare_main(argv: list[str] | None = None) -> None:
    def main() -> int:
        from mltrain.core.errors import MltrainError, os_error_line
        from mltrain.tools.compare import main as compare

        try:
            return compare(argv)
        except OSError as err:  # --out on a read-only path, a full disk, a link: one line, not a traceback
            print(f"mltrain-compare: error: {err if isinstance(err, MltrainError) else os_error_line(err)}",
                  file=sys.stderr)
            return 2

    _entry("mltrain-compare", main)


def _tool(prog: str, module: str, argv: list[str] | None) -> None:
    """`prog`, whose `main(argv)` lives in `module` (imported only now) and returns the exit status."""
    def main() -> int:
        import importlib

        return importlib.import_module(module).main(argv)

    _entry(prog, main)


def prepare_main() -> None:
    def main() -> None:
        import logging

        from mltrain.data.prepare import hydra_main
        from mltrain.core.errors import hydra_one_line

        logging.raiseExceptions = False  # a log file on a full disk: the one line says it, no logging tracebacks
        with hydra_one_line("mltrain-prepare"):
            hydra_main()

    _entry("mltrain-prepare", main)


def sample_main(argv: list[str] | None = None) -> None:
    _tool("mltrain-sample", "mltrain.tools.sample", argv)


def export_main(argv: list[str] | None = None) -> None:
    _tool("mltrain-export", "mltrain.tools.export", argv)


def study_main(argv: list[str] | None = None) -> None:
    _tool("mltrain-study", "mltrain.tools.study.cli", argv)
