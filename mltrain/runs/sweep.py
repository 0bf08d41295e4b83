"""A sweep (`mltrain -m`) checked whole before its first job, its failures said once, its workers bounded.

* `check_sweep(config, validate)`, before the sweep dir is claimed: every point of the sweep is composed as the
  launcher will compose it and validated (a bad value of the last point stops the sweep before the
  first job starts, not hours later); two points that would share one job dir (they differ only in
  keys that job-dir names leave out, e.g. `train.progress`) are refused before Hydra writes either
  one's `.hydra/` records; and the joblib launcher's `n_jobs` must be between 1 and the CPUs here.
  The compositions it made are the ones Hydra's sweeper and launcher then use (each point composed once).
* `record_failure(job_return, message)`: a job that failed with a known error (one line, said when it
  failed) is recorded and marked done, so Hydra does not re-raise it at the end with a traceback;
  `sweep_failed()` then tells the CLI to exit with status 1. Recorded failures travel back from
  joblib's worker processes inside the job's return value.
* `watch_sweep_process(config)`: in a joblib worker, a thread that ends the worker when the sweep's main
  process is gone (its run first gets SIGTERM: it finishes its step and writes a checkpoint, for at
  most GRACE_S seconds), so no worker outlives a killed sweep.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from mltrain.core.errors import ConfigError, composition_line
from mltrain.runs.keys import split_override

SWEEP_PID_ENV = "MLTRAIN_SWEEP_PID"  # the sweep's main process, inherited by the launcher's workers
WATCH_INTERVAL_S = 1.0
GRACE_S = 30.0  # after SIGTERM: time for the current step and a checkpoint
_failures: list[str] = []


# ---------------------------------------------------------------------------------------------
# Before the first job


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def threaded(launcher: Any) -> Optional[str]:
    """Why the joblib launcher settings `launcher` (hydra.launcher's keys, without the prefix) would run
    jobs as threads of one process, or None: backend=threading, or no backend with prefer=threads or
    require=sharedmem (joblib then picks threads)."""
    backend, prefer, require = (launcher.get(k) for k in ("backend", "prefer", "require"))
    if backend is not None:
        return "hydra.launcher.backend=threading" if str(backend) == "threading" else None
    if str(prefer) == "threads":
        return "hydra.launcher.prefer=threads"
    return "hydra.launcher.require=sharedmem" if str(require) == "sharedmem" else None


THREADS_LINE = ("{what} runs every job in a thread of one process: a run's stop signals (Ctrl-C, SIGTERM) cannot "
                "reach it there and its work would be lost; leave the joblib backend to its default (loky: a "
                "process per job); nothing was started")


def check_launcher(config: DictConfig) -> None:
    """ConfigError unless the joblib launcher runs jobs in processes, n_jobs of them between 1 and the CPUs."""
    launcher = config.hydra.get("launcher") or {}
    if "joblib" not in str(launcher.get("_target_", "")).lower():
        return
    if what := threaded(launcher):
        raise ConfigError(THREADS_LINE.format(what=what))
    n, cpus = launcher.get("n_jobs"), available_cpus()
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"hydra.launcher.n_jobs={n} must be the number of jobs to run at once, 1 to {cpus} "
                          f"(the CPUs here); nothing was started")
    if n > cpus:
        raise ConfigError(f"hydra.launcher.n_jobs={n} is more than the {cpus} CPUs here: every job is a process "
                          f"that trains, so at most {cpus} run at once; nothing was started")


def job_overrides(config: DictConfig) -> Optional[list[list[str]]]:
    """Every job's overrides, in the order Hydra's basic sweeper launches them; None for another sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.get("sweeper") or {}
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    overrides = parser.parse_overrides([*params, *config.hydra.overrides.task])
    return BasicSweeper.split_arguments(overrides, None)[0]


def _job_config(config: DictConfig, overrides: list[str], num: int, composed: dict) -> DictConfig:
    from hydra.core.global_hydra import GlobalHydra

    job = GlobalHydra.instance().config_loader().load_sweep_config(config, list(overrides))
    if len(composed) < _KEPT:
        composed[tuple(overrides)] = [copy.deepcopy(job), 0]
    with open_dict(job.hydra.job):
        job.hydra.job.id, job.hydra.job.num = f"{job.hydra.job.name}_{num}", num
    return job


# Hydra's basic sweeper composes each job once to check its batch, and the launcher once more to run it:
# both uses get a copy of the composition check_sweep made (~0.2 s a job each, most of a short job's cost).
# A composed job config holds ~170 KB: the first _KEPT points are kept (the others composed as Hydra does).
_USES = 2
_KEPT = 256


def _composed_once(config: DictConfig, composed: dict) -> None:
    """From now on in this process, the config loader answers `load_sweep_config(config, overrides)` for a
    point check_sweep composed with a copy of that composition (the same config: the same files and
    overrides, the same master config; its second use frees it); anything else it composes as before."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    compose = loader.load_sweep_config

    def load_sweep_config(master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        entry = composed.get(tuple(sweep_overrides)) if master_config is config else None
        if entry is None:
            return compose(master_config, sweep_overrides)
        entry[1] += 1
        if entry[1] >= _USES:
            del composed[tuple(sweep_overrides)]
        return copy.deepcopy(entry[0])

    loader.load_sweep_config = load_sweep_config  # type: ignore[method-assign]  # this loader instance's, replaced


def check_sweep(config: DictConfig, validate: Callable[[DictConfig], object]) -> None:
    """ConfigError (one line, nothing written) for a sweep that cannot run whole: see the module docstring.
    `validate` is the run config's own check of a composed point (mltrain/config.py validate_composed:
    typed, then validated), applied to every point."""
    check_launcher(config)
    jobs = job_overrides(config)
    if jobs is None:
        return
    dirs: dict[str, int] = {}
    values: dict[str, set] = {}
    for overrides in jobs:
        for o in overrides:
            values.setdefault(_key_text(o), set()).add(o)
    swept = {key for key, seen in values.items() if len(seen) > 1}  # what tells the points apart
    composed: dict[tuple, list] = {}
    for num, overrides in enumerate(jobs):
        shown = [o for o in overrides if _key_text(o) in swept]
        point = f"sweep point #{num} ({' '.join(shown) or 'no overrides'})"
        try:
            job = _job_config(config, overrides, num, composed)
            validate(job)
            subdir = str(OmegaConf.select(job, "hydra.sweep.subdir"))
        except ConfigError as err:
            raise ConfigError(f"{point}: {err}; no job was started") from None
        except Exception as err:  # noqa: BLE001 - Hydra's composition errors: one line
            raise ConfigError(f"{point}: {composition_line(err, overrides)}; no job was started") from None
        if subdir in dirs:
            raise ConfigError(_shared_dir(config, jobs[dirs[subdir]], dirs[subdir], overrides, num, subdir, swept))
        dirs[subdir] = num
    _composed_once(config, composed)


def _key_text(override: str) -> str:
    """An override's key as the command line spells it (`+a.b`): what tells the sweep's points apart."""
    return split_override(override)[0]


def _shared_dir(config: DictConfig, a: list[str], i: int, b: list[str], j: int, subdir: str, swept: set) -> str:
    differ = sorted({_key_text(o) for o in set(a) ^ set(b)})
    a, b = ([o for o in a if _key_text(o) in swept] or a), ([o for o in b if _key_text(o) in swept] or b)
    why = (f"they differ only in {', '.join(differ)}, which job-dir names leave out "
           f"(hydra.job.config.override_dirname.exclude_keys)" if differ else "they are the same point")
    return (f"sweep points #{i} ({' '.join(a)}) and #{j} ({' '.join(b)}) would share the job dir "
            f"{os.path.join(str(config.hydra.sweep.dir), subdir)}: {why}; sweep them into separate "
            f"hydra.sweep.dir folders (nothing was written)")


# ---------------------------------------------------------------------------------------------
# Failures said once


class FailedJob:
    """A job's known failure, already reported in one line. Unpickling it (in the sweep's main process,
    for a job that ran in a joblib worker) records it there too."""

    def __init__(self, message: str):
        self.message = message

    def __reduce__(self) -> tuple:
        return (_recorded, (self.message,))

    def __repr__(self) -> str:
        return f"FailedJob({self.message!r})"


def _recorded(message: str) -> FailedJob:
    _failures.append(message)
    return FailedJob(message)


def record_failure(job_return: Any, message: str) -> None:
    """Mark a failed job as reported: Hydra's sweeper will not re-raise it (with its traceback) at the end."""
    from hydra.core.utils import JobStatus

    job_return.status = JobStatus.COMPLETED
    job_return._return_value = _recorded(message)


def sweep_failed() -> bool:
    return bool(_failures)


# ---------------------------------------------------------------------------------------------
# No orphans


def mark_sweep_process() -> None:
    """Called in the sweep's main process before any worker starts: they inherit its pid. A new sweep
    (a process may run several one after another): none of its jobs has failed yet."""
    os.environ[SWEEP_PID_ENV] = str(os.getpid())
    _failures.clear()


def watch_sweep_process(config: DictConfig) -> None:
    """In a joblib worker (a process other than the sweep's main one): stop when the main process is gone."""
    main = os.environ.get(SWEEP_PID_ENV, "")
    launcher = config.hydra.get("launcher") or {}
    if not main.isdigit() or int(main) == os.getpid() or "joblib" not in str(launcher.get("_target_", "")).lower():
        return
    if any(t.name == "mltrain-sweep-watch" for t in threading.enumerate()):
        return  # one watcher per worker, started by its first job
    threading.Thread(target=_watch, args=(int(main),), name="mltrain-sweep-watch", daemon=True).start()


def _gone(pid: int) -> bool:
    if os.getppid() != pid:
        return True  # reparented: the main process died
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _in_job() -> bool:
    """Whether this worker's main thread is running a job now (Hydra's run_job is on its stack)."""
    main = threading.main_thread().ident
    frame = sys._current_frames().get(main) if main is not None else None
    while frame is not None:
        if frame.f_code.co_name == "run_job":
            return True
        frame = frame.f_back
    return False


def _watch(main: int) -> None:
    while not _gone(main):
        time.sleep(WATCH_INTERVAL_S)
    if _in_job():
        os.kill(os.getpid(), signal.SIGTERM)  # the run finishes its step, writes a checkpoint, and stops
        deadline = time.monotonic() + GRACE_S
        while _in_job() and time.monotonic() < deadline:
            time.sleep(0.2)
    os._exit(128 + signal.SIGTERM)  # nobody is left to give this worker a job
