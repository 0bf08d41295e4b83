"""A study's time window: `mltrain-study ... --for 2h30m` or `--until 18:40` (or an ISO date and time).

The window opens when the command starts. Before a sweep is launched, the runs it would start are
set against the time left at the seconds per FLOP this invocation's own finished runs took on this
machine (their summary.json's wall time over their FLOPs, shared among the parallel workers), plus the
last batch's start-up (its wall time beyond its runs' own); a run whose estimated end passes the window
is not launched (of a sweep that does not fit whole, the runs that fit are launched, each as a sweep of
its own). Before any run of this invocation has finished there is no rate: the first runs (one per
parallel worker) are launched to measure it. When the window ends while runs train, they are stopped as
a Ctrl-C at the terminal stops them (SIGINT to the sweep's process group: each run checkpoints after its
step and is resumed by the next invocation). The study then ends with exit status 0 and one line
(`closing_line`): runs done / planned, FLOPs done / planned, the time the rest is estimated at, and the
command that continues it.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from mltrain.core.errors import ConfigError

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?")
WINDOW_FLAGS = ("--for", "--until")


def now() -> float:
    """The window's clock (seconds since the epoch); one place, so a test can move it."""
    return time.time()


class WindowClosed(Exception):
    """The window has ended, or the next run would end after it: the study stops, resumable."""


def parse_duration(text: str) -> float:
    """Seconds in `2h30m`, `90m`, `45s`, `1.5h`, `1d`; ConfigError naming the text otherwise."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or m is None or not any(m.groups()):
        raise ConfigError(f"--for {text!r}: not a duration; give hours, minutes or seconds, e.g. --for 2h30m, "
                          "--for 90m, --for 45s")
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    if seconds <= 0:
        raise ConfigError(f"--for {text!r}: the window must be longer than 0 s")
    return seconds


def parse_until(text: str, start: float) -> float:
    """The end (epoch seconds) `--until` names: `HH:MM` (or `HH:MM:SS`), local time, its next occurrence
    after `start`; or an ISO date and time (`2026-12-07T06:00`, local unless it names its zone), which must
    lie ahead. ConfigError naming the text otherwise."""
    text = text.strip()
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", text)
    if clock:
        h, m, s = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        if h > 23 or m > 59 or s > 59:
            raise ConfigError(f"--until {text!r}: not a time of day (HH:MM, 00:00 to 23:59)")
        here = dt.datetime.fromtimestamp(start).astimezone()
        at = here.replace(hour=h, minute=m, second=s, microsecond=0)
        if at.timestamp() <= start:
            at += dt.timedelta(days=1)  # 06:00 given at 23:00: tomorrow's
        return at.timestamp()
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--until {text!r}: not a time; give HH:MM (local) or an ISO date and time, e.g. "
                          "--until 18:40 or --until 2026-12-07T06:00") from None
    end = (when if when.tzinfo else when.astimezone()).timestamp()
    if end <= start:
        raise ConfigError(f"--until {text!r} has passed already ({_duration(start - end)} ago): give a time ahead")
    return end


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def without_window(argv: Iterable[str]) -> list[str]:
    """`argv` less the window's options (`--for X`, `--for=X`, `--until X`): the command that continues a
    study stopped by its window runs it to the end (add a window of one's own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in WINDOW_FLAGS:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in WINDOW_FLAGS):
            continue
        out.append(a)
    return out


@dataclass
class Window:
    """The end of the window (epoch seconds) and what this invocation's batches measured."""

    end: float
    given: str  # as the command gave it: "--for 2h30m"
    seconds: float = 0.0  # the wall time of this invocation's runs that finished (their summary.json's)
    flops: float = 0.0  # ... and their FLOPs
    overhead: float = 0.0  # the last batch's seconds beyond its runs' own (start-up of the sweeps' process)
    parallel: int = 1  # runs that train at once
    stopped: bool = False  # the window ended while runs trained

    @classmethod
    def from_args(cls, for_: Optional[str], until: Optional[str], start: Optional[float] = None) -> Optional["Window"]:
        start = now() if start is None else start
        if for_ is not None and until is not None:
            raise ConfigError("--for and --until both given: give one window")
        if for_ is not None:
            return cls(start + parse_duration(for_), f"--for {for_}")
        if until is not None:
            return cls(parse_until(until, start), f"--until {until}")
        return None

    def left(self) -> float:
        return self.end - now()

    def closed(self) -> bool:
        return self.left() <= 0

    @property
    def rate(self) -> Optional[float]:
        """Seconds per FLOP on this machine, by this invocation's own finished runs (None: none yet)."""
        return self.seconds / self.flops if self.flops > 0 else None

    def measured(self, batch_seconds: float, runs: list[tuple[float, float]]) -> None:
        """A batch that ran to its end: its wall time, and (seconds, FLOPs) of each run that finished in it."""
        if runs and not self.stopped:
            own = sum(s for s, _ in runs)
            self.seconds += own
            self.flops += sum(f for _, f in runs)
            self.overhead = max(0.0, batch_seconds - own / self.parallel)

    def estimate(self, flops: float) -> Optional[float]:
        """Seconds a batch of runs of `flops` planned FLOPs takes here (None: no rate yet)."""
        rate = self.rate
        return None if rate is None else self.overhead + rate * flops / self.parallel

    def fitting(self, costs: list[float]) -> int:
        """How many of the runs of `costs` (planned FLOPs, in launch order) end inside the window when
        launched now as one batch (the sweeps' process started once, `parallel` runs at a time); before
        this invocation has measured a rate, the first `parallel` of them (they measure it); 0 once the
        window has closed."""
        if self.closed():
            return 0
        if self.rate is None:
            return min(len(costs), self.parallel)  # the first runs measure the rate
        left, spent = self.left(), 0.0
        for i, cost in enumerate(costs):
            spent += cost
            seconds = self.estimate(spent)
            if seconds is not None and seconds > left:
                return i
        return len(costs)


def closing_line(window: Window, done: int, total: int, flops_done: float, flops_planned: float,
                 estimate: Optional[float], command: str) -> str:
    """The one line a study stopped by its window ends with."""
    left = f"about {_duration(estimate)} left at this machine's rate" if estimate is not None else \
        "no estimate of the time left (no run finished on this machine yet)"
    return (f"mltrain-study: the time window ({window.given}) ended: {done}/{total} runs done, "
            f"{flops_done:.3g}/{flops_planned:.3g} FLOPs done, {left}; continue with: {command}")
