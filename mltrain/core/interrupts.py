"""Ctrl-C that is not lost: Python raises KeyboardInterrupt wherever the main thread is, and one raised
inside a finaliser is only printed, and the program goes on. `CtrlC` remembers every SIGINT, so ordinary
code can ask afterwards (`requested`, `check()`) and stop where it is safe to.

    with CtrlC(defer=True) as ctrl_c:   # the first Ctrl-C stops at the next check(); a second at once
        for item in work:
            ctrl_c.check()
            ...

Without `defer` a Ctrl-C raises at once, as Python's own handler does, and is remembered too. Outside
the main thread (where signal handlers cannot be set) it changes nothing.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

# mltrain's exit statuses for a run stopped by SIGINT, SIGTERM, SIGUSR1 or SIGHUP (it wrote a checkpoint first)
STOPPED = (130, 143, 138, 129)


class CtrlC:
    def __init__(self, defer: bool = False) -> None:
        self.defer, self.count = defer, 0
        self._previous: Any = None  # the handler signal.signal replaced (a callable, SIG_DFL or SIG_IGN)

    @property
    def requested(self) -> bool:
        return self.count > 0

    def check(self) -> None:
        """KeyboardInterrupt if Ctrl-C was pressed since entering."""
        if self.count:
            raise KeyboardInterrupt

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if not self.defer or self.count > 1:
            raise KeyboardInterrupt

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
