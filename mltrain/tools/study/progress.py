"""What a person follows: one line per run that ends, and the `--status` view of a study's folders.

A run has ended when its summary.json says `finished` or `diverged` (mltrain leaves both as they are
on a resume); `interrupted`, or a folder without a summary, is a run to resume. The lines come from
watching the runs' folders, so they read the same whatever launcher ran the runs (here, on workers,
on a cluster). The ETA weighs each run by its planned FLOPs (every phase of its plan:
mltrain/method/cost.py) and times them at the rate per FLOP the runs finished so far measured.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TextIO, TypeGuard

from mltrain.runs import rundir
from mltrain.runs.files import read_summary
from mltrain.tools.study.plan import EVAL, TUNE, Choice, Layout, Run, evaluation_sweeps, tuning_sweeps
from mltrain.tools.study.schema import StudyConfig

ENDED = ("finished", "diverged")


def run_status(run_dir: Path) -> Optional[dict]:
    """The run's summary.json (None when it has none, or an unreadable one or one that is no JSON object: the
    run did not end)."""
    try:
        return read_summary(run_dir)
    except (OSError, ValueError):
        return None


def ended(summary: Optional[dict]) -> TypeGuard[dict]:
    return summary is not None and summary.get("status", "finished") in ENDED


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _loss(summary: dict) -> str:
    val = summary.get("final_val_loss")
    return f"val loss {val:.4f}" if isinstance(val, (int, float)) else "no val loss"


def measured(summary: dict) -> Optional[tuple[float, float]]:
    """(seconds, FLOPs) a finished run took by its summary.json: its wall time (from the initial
    evaluation on) and every FLOP it did (training, evaluation, diagnostics), the units of a planned cost
    (mltrain/method/cost.py); without a wall time, its training time and training FLOPs. None when the
    summary says neither."""
    flops = summary.get("total_flops")
    seconds = summary.get("wall_time_s")
    extra = [summary.get(k) for k in ("eval_flops", "diag_flops")]
    if not isinstance(seconds, (int, float)):
        seconds, extra = summary.get("train_time_s"), []
    amounts = [x for x in extra if _amount(x)]
    if not (_amount(flops) and _amount(seconds)) or len(amounts) < len(extra) or not flops:
        return None
    return float(seconds), float(flops) + float(sum(amounts))


def _amount(x: object) -> TypeGuard[float]:
    """A count a summary can hold: a number (not a bool), not negative."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0


class Progress:
    """Counts runs and their planned FLOPs; prints a line for every run that ends or fails. The ETA is
    the FLOPs left at the seconds per FLOP the finished runs took (their summaries), plus each run left's
    start-up (`start_s`: a summary's wall time begins after it), over the runs that train at once
    (`parallel`); before any run has finished there is no ETA."""

    def __init__(self, out: TextIO, total: int, done: int, cost_left: float, parallel: int = 1,
                 start_s: float = 0.0):
        self.out, self.total, self.done, self.parallel = out, total, done, max(1, parallel)
        self.cost_left, self.start_s = cost_left, start_s
        self.seconds, self.flops = 0.0, 0.0  # what the finished runs measured
        self._lock = threading.Lock()

    def measure(self, summary: dict) -> None:
        """Count a finished run's seconds and FLOPs into the rate (a run that ended earlier, too)."""
        taken = measured(summary) if summary.get("status", "finished") == "finished" else None
        if taken is not None:
            with self._lock:
                self.seconds, self.flops = self.seconds + taken[0], self.flops + taken[1]

    def _eta(self) -> str:
        if self.flops <= 0:
            return "ETA after the first run"
        rate, runs_left = self.seconds / self.flops, max(self.total - self.done, 0)
        return f"ETA {_duration((rate * max(self.cost_left, 0.0) + self.start_s * runs_left) / self.parallel)}"

    def settle(self, run: Run, cost: float, what: str) -> None:
        with self._lock:
            self.done += 1
            self.cost_left -= cost
            left = self.total - self.done
            print(f"[{self.done}/{self.total}] {run.name}: {what} | {left} run{'s' if left != 1 else ''} left, "
                  f"{self._eta()}", file=self.out, flush=True)

    def recount(self, done: int, cost: float) -> None:
        """Runs (and their cost) found done, or no longer done, without ending now."""
        with self._lock:
            self.done += done
            self.cost_left -= cost

    def grow(self, runs: int, done: int, cost: float) -> None:
        """Runs planned since the start (the tuning rules' and the bracketing budgets'), `done` of them ended."""
        with self._lock:
            self.total += runs
            self.done += done
            self.cost_left += cost

    def ended(self, run: Run, summary: dict, cost: float) -> None:
        self.measure(summary)
        took = summary.get("wall_time_s")
        status = summary.get("status", "finished")
        what = _loss(summary) if status == "finished" else f"{status}: {summary.get('status_reason', '')}"
        self.settle(run, cost, what + (f" ({took:.1f} s)" if isinstance(took, (int, float)) else ""))

    def say(self, line: str) -> None:
        with self._lock:
            print(line, file=self.out, flush=True)


class Watcher:
    """Polls the folders of a sweep's pending runs (a thread) and calls `on_end(run, summary)` once
    for each that ends."""

    def __init__(self, runs: Iterable[Run], on_end: Callable[[Run, dict], None], every: float = 0.25):
        self.pending = list(runs)
        self.on_end, self.every = on_end, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        still = []
        for run in self.pending:
            summary = run_status(run.dir)
            if ended(summary):
                self.on_end(run, summary)
            else:
                still.append(run)
        self.pending = still

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def __enter__(self) -> "Watcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # the runs that ended since the last look


def failure_reason(run: Run, log_text: str) -> str:
    """Why a run did not end: its summary's reason, else the line its own log (written by the process
    that ran it) or its sweep's output has for it."""
    summary = run_status(run.dir)
    if summary is not None and summary.get("status_reason"):
        return f"{summary.get('status')}: {summary['status_reason']}"
    for own in sorted(run.dir.glob("*.log")) if run.dir.is_dir() else []:
        reason = _failed_line(run, own.read_text(errors="replace"))
        if reason:
            return reason
    reason = _failed_line(run, log_text)
    if reason:
        return reason
    if not run.dir.exists():  # the sweep stopped before its jobs: Hydra's (or mltrain's) error comes first
        said = [line.strip() for line in log_text.splitlines()[1:] if line.strip() and not line.startswith("[")]
        if said:
            return f"the sweep did not start: {said[0]}"
    return "did not end (see the study's log)"


def _failed_line(run: Run, log_text: str) -> Optional[str]:
    """The reason in mltrain's `job #N (<its overrides>) failed: <why>` line for this run, if any."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if f"({run.dirname_full}) failed" not in line:
            continue
        reason = line.split(") failed", 1)[1].lstrip(": ").strip()
        if reason:
            return reason
        tail = []  # a crash: the last line of its traceback
        for later in lines[i + 1:]:
            if re.match(r"^\[\d{4}-", later):
                break
            if later.strip():
                tail.append(later.strip())
        return f"crashed: {tail[-1]}" if tail else "crashed"
    return None


# ---------------------------------------------------------------------------------------------
# --status


def _states(dirs: Iterable[Path]) -> dict[str, int]:
    """How many of the run folders `dirs` are in each state (a folder need not exist: not started)."""
    states = {"finished": 0, "diverged": 0, "running": 0, "to resume": 0, "not started": 0}
    for d in dirs:
        summary = run_status(d)
        if summary is not None and summary.get("status", "finished") in ENDED:
            states[summary.get("status", "finished")] += 1
        elif d.is_dir() and rundir.live_holder(d) is not None:
            states["running"] += 1  # a live process holds the run's folder: it is training now
        elif summary is not None or d.exists():
            states["to resume"] += 1
        else:
            states["not started"] += 1
    return states


def _count(states: dict[str, int]) -> str:
    rest = dict(states)
    head = f"{rest.pop('finished')}/{sum(states.values())} finished"
    return ", ".join([head, *(f"{n} {what}" for what, n in rest.items() if n)])


class StatusView:
    """`--status`: one line per scale, stage and arm (`lines`), and whether the study is complete: every run
    on its folders ended, every arm chose its setting, every verdict and the ladder report written."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.states = {"finished": 0, "diverged": 0, "running": 0, "to resume": 0, "not started": 0}
        self.waiting = 0  # arms waiting for stage 1's choice
        self.reports_missing: list[str] = []

    def count(self, dirs: Iterable[Path]) -> str:
        states = _states(dirs)
        for what, n in states.items():
            self.states[what] += n
        return _count(states)

    @property
    def complete(self) -> bool:
        return not (self.not_ended or self.waiting or self.reports_missing)

    @property
    def not_ended(self) -> int:
        return sum(n for what, n in self.states.items() if what not in ENDED)

    def verdict_line(self) -> str:
        """The last line: complete, or what is left."""
        ended_runs = self.states["finished"] + self.states["diverged"]
        diverged = f", {self.states['diverged']} of them diverged" if self.states["diverged"] else ""
        if self.complete:
            return (f"complete: all {ended_runs:,} runs ended{diverged}; every arm chose its setting; every verdict "
                    "and the ladder report written")
        left = [f"{self.not_ended:,} of {ended_runs + self.not_ended:,} runs not ended" if self.not_ended else "",
                f"{self.waiting} arm(s) wait for stage 1" if self.waiting else "",
                f"{', '.join(self.reports_missing)} not yet written" if self.reports_missing else ""]
        return "not complete: " + "; ".join(x for x in left if x)


def status_lines(study: StudyConfig, layout: Layout, choices: dict[str, Optional[dict[str, Choice]]],
                 distrusted: Optional[dict[str, list[str]]] = None) -> StatusView:
    """What is done, per scale, stage and arm; `choices[scale]` is what selection.json records and this
    config's tuning runs bear out (None: stage 1 has not chosen yet), `distrusted[scale]` the arms whose
    record they do not. The runs the tuning rules add as they go (edges, neighbours, later budgets, the
    control's schedule, bracketing) are counted from the folders, in one line per scale. Reads folders
    only: no file is written, no lock taken."""
    view = StatusView()
    lines = view.lines
    holder = rundir.live_holder(layout.root) if layout.root.is_dir() else None
    running = f" (running now: process {holder})" if holder else " (running now)" if holder == 0 else ""
    lines.append(f"study {study.name} in {layout.root}{running}")
    for scale in study.ladder:
        shown: set[Path] = set()
        for sweep in tuning_sweeps(study, layout, scale):
            dirs = [r.dir for r in sweep.runs()]
            shown.update(dirs)
            lines.append(f"  {scale:<10} {TUNE:<8} {sweep.arm:<18} {view.count(dirs)}")
        chosen = choices.get(scale)
        for arm in study.arms:
            if arm in (distrusted or {}).get(scale, []):
                view.waiting += 1
                lines.append(f"  {scale:<10} {EVAL:<8} {arm:<18} waits for stage 1 to choose again: its record in "
                             f"{layout.selection(scale).name} does not follow from this config's tuning runs (edited, "
                             f"or the grid or the runs changed since)")
                continue
            if chosen is None or arm not in chosen:
                view.waiting += 1
                lines.append(f"  {scale:<10} {EVAL:<8} {arm:<18} waits for stage 1 to choose its setting")
                continue
            dirs = [r.dir for s in evaluation_sweeps(study, layout, scale, {arm: chosen[arm]}) for r in s.runs()]
            shown.update(dirs)
            lines.append(f"  {scale:<10} {EVAL:<8} {arm:<18} {view.count(dirs)}")
        added = sorted(d for stage in (TUNE, EVAL) for d in layout.scale(scale).glob(f"{stage}/*/*")
                       if d.is_dir() and not d.is_symlink() and d not in shown)
        if added:
            lines.append(f"  {scale:<10} {'added':<8} {'':<18} {view.count(added)} (the runs the tuning rules added, "
                         "or that this config no longer asks for)")
        report = layout.verdict(scale) / "comparison.md"
        if not report.exists():
            view.reports_missing.append(f"{scale}'s verdict")
        lines.append(f"  {scale:<10} {'verdict':<8} {'':<18} {report if report.exists() else 'not yet written'}")
    ladder = layout.ladder.with_suffix(".md")
    if not ladder.exists():
        view.reports_missing.append("the ladder report")
    lines.append(f"  {'ladder':<10} {'':<8} {'':<18} {ladder if ladder.exists() else 'not yet written'}")
    lines.append(view.verdict_line())
    return view
