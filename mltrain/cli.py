"""`mltrain`: the training command. Hydra parses and composes, RunGuard checks the run dir before Hydra
writes into it, mltrain/run.py does the work. The other tools' entry points are in mltrain/console.py,
which loads none of the training stack; the `mltrain` console script enters through mltrain/console.py
too, so a Ctrl-C while torch imports is one line.

Composing, checking (mltrain/preflight.py) and refusing a config, and `--help`, load no torch: the
training stack (mltrain/run.py, training/distributed.py) is imported once RunGuard has accepted the
config, before anything is written, or first thing under torchrun or SLURM tasks, whose ranks join
before Hydra starts (tests/run/test_no_torch.py)."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from mltrain.config import Config, register_configs, resuming, typed, validate_composed
from mltrain.core.errors import ConfigError, MltrainError, hydra_one_line, os_error_line, report
from mltrain.method import plugins
from mltrain.preflight import Checked, preflight
from mltrain.runs import rundir
from mltrain.runs import sweep as sweeps
from mltrain.runs.provenance import redact_hydra_records
from mltrain.training.resume import resume_command, say
from mltrain.training.world import world_from_env

__all__ = ["RunGuard", "hydra_task", "launch", "train_main"]

log = logging.getLogger("mltrain")

# The YAML tree ships inside the package as `mltrain.conf` (mapped from the top-level conf/ folder in
# pyproject.toml), so the same path works from a checkout, an editable install and a wheel.
CONFIG_PATH = "pkg://mltrain.conf"

# `mltrain --help` lists the groups of conf/ but these: Hydra's own, and mltrain-study's.
NOT_RUN_GROUPS = ("hydra", "study", "__pycache__")


def _group_folders(searchpath: Sequence[str]) -> Iterator[Any]:
    """The folders of conf/ and of the `file://` and `pkg://` entries of hydra.searchpath, in that order."""
    from importlib import resources

    yield resources.files("mltrain.conf")
    for entry in searchpath:
        kind, _, where = str(entry).partition("://")
        if kind == "file":
            yield Path(where)
        elif kind == "pkg":
            try:
                yield resources.files(where.replace("/", "."))
            except (ModuleNotFoundError, TypeError):
                continue  # Hydra itself says so when it composes


def help_groups(searchpath: Sequence[str] = ()) -> str:
    """`mltrain --help`'s groups and their options (conf/config.yaml, `${mltrain_help_groups:...}`): the
    presets in conf/ and in the folders of hydra.searchpath, then the values the registries give
    `depth_method=` and `coarsening.scheme=` (a plugin's method or scheme included)."""
    from mltrain.method.coarsening import scheme_names
    from mltrain.method.registry import depth_method_values

    options: dict[str, set[str]] = {}
    for folder in _group_folders(searchpath):
        if not folder.is_dir():
            continue
        for group in folder.iterdir():
            if group.is_dir() and group.name not in NOT_RUN_GROUPS:
                names = {f.name[:-5] for f in group.iterdir() if f.name.endswith(".yaml")}
                options.setdefault(group.name, set()).update(names)
    lines = [f"{group}: {', '.join(sorted(names))}" for group, names in sorted(options.items()) if names]
    lines += ["", "== Registered ==", "Depth methods and coarsening schemes (plugins=[my_module] adds its own)", "",
              f"depth_method={'|'.join(depth_method_values())}", f"coarsening.scheme={'|'.join(scheme_names())}"]
    return "\n".join(lines)


OmegaConf.register_new_resolver("mltrain_help_groups", help_groups, replace=True)
register_configs()


def import_plugins(argv: Sequence[str] = ()) -> None:
    """Import the plugins (mltrain/method/plugins.py) that MLTRAIN_PLUGINS and the overrides `argv`
    (`plugins=[my_method]`) name, then store the schema with what they registered: before Hydra composes.
    ConfigError in one line for a module that is not there."""
    plugins.load([*plugins.from_env(), *plugins.from_overrides(argv)])
    register_configs()


# The typed config and what RunGuard.on_run_start checked (preflight.preflight) for the single run that
# follows it in this process, handed to the task so that the conversion and the checks are made once.
_checked: Optional[tuple[Config, Checked]] = None


def _fail(message: str) -> None:
    report("mltrain", message)
    sys.exit(2)


def _typed_and_checked(config: DictConfig, run_dir: str | Path) -> tuple[Config, Checked]:
    """Where the composed config becomes the typed `Config` the run takes (config.typed: its keys
    checked, then converted once) and is checked for `run_dir` (preflight.preflight; the resume check
    compares the config as composed, interpolations as written)."""
    cfg = typed(config)
    return cfg, preflight(cfg, run_dir, as_written=config)


@contextlib.contextmanager
def _one_line(where: str) -> Iterator[None]:
    """An MltrainError inside, or an OSError (a run dir whose name is too long, a full disk: Hydra would
    only warn) said of `where`: one error line, exit status 2."""
    try:
        yield
    except MltrainError as err:
        _fail(str(err))
    except OSError as err:
        _fail(f"{where}: {os_error_line(err)}")


def _load_training() -> None:
    """Import the training stack (torch: about 1.5 s) once the config is accepted, before anything is
    written: a refused config never pays for it, and a Ctrl-C while it loads leaves no run dir."""
    import mltrain.run  # noqa: F401


class RunGuard(Callback):
    """Checks around Hydra's own steps.

    - Before a single run: refuse a config that cannot run (ConfigError), a directory that holds an
      earlier run or is in use by a live one, and claim the directory for the run's whole life
      (mltrain/runs/rundir.py), all before Hydra writes `.hydra/` into it: one error line, exit status 2.
      With train.resume=true: a finished run is left untouched (one line, exit status 0), a run made
      with another config is refused (naming the keys), and an unfinished one is claimed and goes on
      to the task, which continues it.
    - Before a multirun: the same for the sweep directory; a sweep directory with any earlier job in
      it (finished or killed) is refused before a job's `.hydra/` is rewritten, unless
      train.resume=true (each job is then resumed, started or skipped by the task; see mltrain.training.resume).
    - After each multirun job: a failed job is reported when it fails (one line for bad input or a
      diverged run, the traceback for a crash) and the sweep goes on; at the end Hydra re-raises the
      first failure and `mltrain -m` exits with status 1.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _checked
        run_dir = Path(config.hydra.run.dir)
        with _one_line("hydra.run.dir"):
            cfg, checked = _typed_and_checked(config, run_dir)  # reads only; another config when resuming: ConfigError
            previous = checked.previous
            if previous is not None and previous.ended:
                say(f"{previous.describe()}: nothing to resume, left untouched")
                sys.exit(0)
        _load_training()
        with _one_line("hydra.run.dir"):
            if world_from_env().is_main:  # one owner: the other ranks of a torchrun job write nothing
                rundir.claim(run_dir, allow_earlier=resuming(config.train.resume))  # held until the process ends
        _checked = (cfg, checked)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        with _one_line("hydra.sweep.dir"):
            # every point valid, one job dir each, n_jobs bounded: before any write
            sweeps.check_sweep(config, validate_composed)
        _load_training()
        with _one_line("hydra.sweep.dir"):
            sweeps.mark_sweep_process()
            self._sweep = rundir.claim(sweep, what="hydra.sweep.dir", earlier=rundir.earlier_sweep,
                                       holds="earlier runs", allow_earlier=resuming(config.train.resume))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        redact_hydra_records(config)  # Hydra has just written .hydra/ (and multirun.yaml): no secret values
        if config.hydra.mode == RunMode.MULTIRUN:
            sweeps.watch_sweep_process(config)  # a joblib worker ends when its sweep is killed

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or job_return.status != JobStatus.FAILED:
            return
        from mltrain.run import RunDiverged  # the job has run: the training stack is loaded already

        err = job_return._return_value
        job = f"job #{config.hydra.job.num} ({config.hydra.job.override_dirname or 'no overrides'})"
        if isinstance(err, ConfigError) and resuming(config.train.resume):
            say(f"{job} failed: {err}")  # not into the job's log: the dir holds an earlier run, left as it was
        elif isinstance(err, (MltrainError, RunDiverged)):
            log.error("%s failed: %s", job, err)
        else:
            log.error("%s failed", job, exc_info=err)
            return
        sweeps.record_failure(job_return, str(err))  # said once: no traceback when the sweep ends

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if getattr(self, "_sweep", None) is not None:
            self._sweep.release()  # the sweep dir is free for a later sweep (mltrain-study runs several in one process)
        if sweeps.sweep_failed():
            sys.exit(1)  # each failed job has said why in its one line


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def hydra_task(cfg: DictConfig) -> float | None:
    """The task Hydra runs for `mltrain` (each job of `mltrain -m`): one run, its errors in one line. The
    run takes the typed config (made once, with the checks, here or by RunGuard before a single run)."""
    from mltrain.run import RunDiverged, RunInterrupted, run  # loaded by RunGuard once the config was accepted
    from mltrain.training import distributed

    global _checked
    ready, _checked = _checked, None
    if HydraConfig.get().mode != RunMode.RUN:
        ready = None  # each job of a multirun is typed and checked by itself
    try:
        import_plugins()  # a sweep's worker process (hydra/launcher=local): those of MLTRAIN_PLUGINS
        with distributed.one_line_when_a_rank_is_lost():
            typed_cfg, checked = ready or _typed_and_checked(cfg, HydraConfig.get().runtime.output_dir)
            return run(typed_cfg, checked=checked)
    except (MltrainError, RunDiverged) as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # RunGuard.on_job_end reports it in one line and the sweep goes on
        if isinstance(err, ConfigError) and not world_from_env().is_main:
            sys.exit(2)  # every rank checks the same config: rank 0 says it, once
        if isinstance(err, ConfigError) and resuming(cfg.train.resume):
            say(f"error: {err}")  # the dir holds an earlier run: its log file gets nothing either
            sys.exit(2)
        report("mltrain", str(err))  # one clear line (console and the run's log), no traceback
        sys.exit(1 if isinstance(err, RunDiverged) else 2)
    except RunInterrupted as err:
        # Stops a sweep too: the rest of it is for `train.resume=true`, which the line gives.
        if world_from_env().is_main:  # one line per job, not one per rank
            say(str(err))
        err.hand_on()  # under submitit (SLURM): requeue the job, which then resumes by itself
        sys.exit(err.exit_code)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training started
        say(f"interrupted; resume (from the last checkpoint, if any) with: "
            f"{resume_command(HydraConfig.get().runtime.output_dir)}")
        sys.exit(130)


@contextlib.contextmanager
def launch() -> Iterator[None]:
    """Around the Hydra task of `mltrain`: under torchrun or SLURM tasks the ranks joined before Hydra
    names the run dir (see distributed.py), Hydra's override parser and its own writers in one line, and
    at the end the ranks' barrier and the process group shut down. A block, not a wrapper: the console
    entry point calls the task itself (mltrain/console.py)."""
    logging.raiseExceptions = False  # a log file on a full disk: no "--- Logging error ---" tracebacks
    try:
        import_plugins(sys.argv[1:])  # their methods, sections and schemes: in the schema Hydra composes onto
    except MltrainError as err:
        _fail(str(err))
    with _ranks_joined():
        with hydra_one_line("mltrain"):  # Hydra's override parser and its own writers: one line too
            yield


@contextlib.contextmanager
def _ranks_joined() -> Iterator[None]:
    """Under torchrun or SLURM tasks: the ranks joined before Hydra starts, and at the end their barrier,
    the process group shut down and the process ended. In one process there is nothing to join, and
    nothing to import."""
    try:
        world = world_from_env()
    except MltrainError as err:
        _fail(str(err))
    if not world.distributed:
        yield
        return
    from mltrain.training import distributed  # torch: the ranks join before Hydra names the run dir

    try:
        distributed.prepare_launch(sys.argv)
    except MltrainError as err:
        _fail(str(err))
    # The ranks meet, the group is shut down and the process ends here, with os._exit: gloo's threads
    # outlive the group and could abort Python's teardown (see distributed.py, "How a rank's process ends").
    with distributed.ends_the_process():
        yield


def train_main() -> None:
    """`mltrain` without the console's Ctrl-C line (the study's in-process runs, `python -m mltrain.cli`)."""
    with launch():
        hydra_task()


if __name__ == "__main__":
    train_main()
