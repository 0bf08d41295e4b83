"""What a run dir holds and whether it can be resumed; the exact resume command; stopping on a signal.

`train.resume=true` continues the unfinished run of `hydra.run.dir` (with `-m`: every unfinished job of
`hydra.sweep.dir`) from its newest checkpoint; so does a SLURM job that SLURM started again (see
`config.resuming`). Before anything is written:

- a dir without a run starts one (e.g. a sweep job that had not started when the sweep was stopped);
- a dir whose `summary.json` says `finished` or `diverged` is left untouched (one line says so);
- a dir whose `.hydra/config.yaml` differs from the config asked for is refused, naming the keys
  (the keys that do not change what a run computes, runs/keys.py BOOKKEEPING_KEYS, may differ).

Hydra writes a job's `.hydra/` before the task runs; `hydra.output_subdir` is therefore resolved by
`config.hydra_subdir` (conf/config.yaml), which turns those writes off when resuming a dir that has
them, so a resumed or skipped run keeps the files it was made with.
"""

from __future__ import annotations

import dataclasses
import shlex
import signal
import sys
import threading
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from mltrain.core.errors import ConfigError
from mltrain.runs.files import SUMMARY, read_summary
from mltrain.runs.keys import is_bookkeeping, override_key
from mltrain.runs.provenance import secret_override
from mltrain.runs.rundir import earlier_run, hydra_value, unproven_run

ENDED = ("finished", "diverged")  # statuses that leave nothing to resume
# Stop after the current step: Ctrl-C, a scheduler (SIGTERM, SIGUSR1), a closed terminal or ssh connection (SIGHUP).
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)
_MISSING = object()


@dataclass
class PreviousRun:
    """What a run dir already holds."""

    run_dir: Path
    status: Optional[str]  # finished | interrupted | diverged (summary.json); None: killed, no summary
    summary: dict = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def describe(self) -> str:
        steps = self.summary.get("fine_steps")
        return f"{self.run_dir} holds a {self.status} run" + (f" ({steps} fine steps)" if steps is not None else "")


def previous_run(run_dir: str | Path) -> Optional[PreviousRun]:
    """The run in `run_dir`, or None when it holds none (no metrics, summary or checkpoint)."""
    run_dir = Path(run_dir)
    summary = _summary(run_dir)
    if summary is not None:
        # no `status`: summaries without one are written only by runs that ran to the end
        return PreviousRun(run_dir, summary.get("status", "finished"), summary)
    # what counts as a run is the run-dir claim's rule (metrics, summary or checkpoints)
    return PreviousRun(run_dir, None) if earlier_run(run_dir) is not None else None


def _summary(run_dir: Path) -> Optional[dict]:
    """The run's summary.json (None: none); ConfigError naming the file when it is cut, edited or not an
    object (it is written atomically, so this is damage, not a run killed while writing it)."""
    try:
        return read_summary(run_dir)
    except (OSError, ValueError) as err:
        detail = getattr(err, "strerror", None) or str(err).splitlines()[0]
        raise ConfigError(f"{run_dir / SUMMARY} is unreadable ({detail}): cannot tell how its run ended; move it "
                          f"away to resume the run, or choose another dir (nothing was changed)") from None


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def _value(v: Any) -> Any:
    return getattr(v, "value", v)  # an Enum compares by its value, as YAML stores it


def _section(schema: Optional[type], name: str) -> Optional[type]:
    """The dataclass that field `name` of the dataclass `schema` holds (Optional[X] -> X), or None."""
    if not dataclasses.is_dataclass(schema):
        return None
    hint = typing.get_type_hints(schema).get(name)
    return next((c for c in (hint, *typing.get_args(hint)) if isinstance(c, type) and dataclasses.is_dataclass(c)), None)


def schema_default(schema: Optional[type], key: str) -> Any:
    """The default the dataclass `schema` (the run's `Config`) gives `key` (`train.max_steps`), else a
    sentinel that equals nothing a config holds."""
    *parents, name = key.split(".")
    for part in parents:
        schema = _section(schema, part)
    for f in dataclasses.fields(schema) if dataclasses.is_dataclass(schema) else ():
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            return f.default_factory() if f.default_factory is not dataclasses.MISSING else _MISSING
    return _MISSING


def new_key_at_default(schema: Optional[type], key: str, value: Any) -> bool:
    """Whether `key`, absent from a config saved by an earlier version, holds here the default of the
    dataclass `schema`: a key added since that does not change what the earlier run computed."""
    return schema is not None and _value(value) == _value(schema_default(schema, key))


def _tree(config: Mapping[str, Any]) -> Any:
    return OmegaConf.to_container(config, resolve=False) if OmegaConf.is_config(config) else config


def config_differences(saved: Mapping[str, Any], asked: Mapping[str, Any], schema: Optional[type] = None) -> list[str]:
    """`key (saved there, asked here)` for every key that differs between two config trees (a saved
    `.hydra/config.yaml`, the composed config or its plain tree), bookkeeping keys left out, and keys
    the saved config lacks that hold their default in `schema` here (added to the schema since it was
    saved; None: the composed `asked`'s own schema). Compared unresolved, so interpolations
    (${oc.env:HOME}, ...) compare as written, not as this machine reads them."""
    if schema is None and OmegaConf.is_config(asked):
        schema = OmegaConf.get_type(asked)
    a, b = _flatten(_tree(saved)), _flatten(_tree(asked))
    out = []
    for key in sorted(set(a) | set(b)):
        if is_bookkeeping(key):
            continue
        x, y = _value(a.get(key, _MISSING)), _value(b.get(key, _MISSING))
        if x is _MISSING and new_key_at_default(schema, key, y):
            continue
        if x != y:
            show = lambda v: "unset" if v is _MISSING else repr(v)  # noqa: E731
            out.append(f"{key} ({show(x)} there, {show(y)} here)")
    return out


def check_resume(run_dir: str | Path, asked: Mapping[str, Any], schema: Optional[type] = None) -> Optional[PreviousRun]:
    """For train.resume=true: the run to continue (or to leave alone, when `.ended`), None for a fresh
    start. `asked`: the config tree asked for, as written (the composed config), compared with the
    saved one; `schema`: as config_differences takes it. Raises ConfigError when the run was made with
    another config. Reads only."""
    run_dir = Path(run_dir)
    saved_cfg = run_dir / ".hydra" / "config.yaml"
    if saved_cfg.exists():
        saved = OmegaConf.load(saved_cfg)
        if not isinstance(saved, DictConfig):
            raise ConfigError(f"{saved_cfg} holds a list, not a run's config: it cannot be resumed")
        diffs = config_differences(saved, asked, schema)
        if diffs:
            raise ConfigError(
                f"{run_dir} holds a run made with another config: {'; '.join(diffs)}. Resume it with its own "
                f"settings ({run_dir / '.hydra' / 'overrides.yaml'}), or choose another dir (nothing was changed)"
            )
    previous = previous_run(run_dir)
    if previous is not None and not previous.ended and (problem := unproven_run(run_dir)):
        raise ConfigError(problem)
    return previous


# ---------------------------------------------------------------------------------------------
# The command that resumes


def _join(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def resume_command(run_dir: str | Path) -> str:
    """The command that continues this run: its own overrides plus train.resume=true and its dir (for a
    multirun job: the sweep's command, which resumes every unfinished job and skips the finished ones).
    The dir is quoted for Hydra, then every word for the shell; secret values (an API key set with
    +hydra.job.env_set...) are left out: the command is printed and recorded, and they are not."""
    run_dir = Path(run_dir).resolve()
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        words = ["mltrain", "train.resume=true", f"hydra.run.dir={hydra_value(run_dir)}"]
        return _join(words) + "  (plus the run's own overrides)"
    hc = HydraConfig.get()
    drop = ("train.resume", "hydra.mode", "hydra.run.dir", "hydra.sweep.dir")
    if hc.mode == RunMode.MULTIRUN:
        sweep = Path(hc.sweep.dir).resolve()
        task, hydra_overrides = list(hc.overrides.task), list(hc.overrides.hydra)
        saved = sweep / "multirun.yaml"
        if saved.exists():  # the sweep's own lists (a,b,c), not this job's values
            ovr = OmegaConf.load(saved).hydra.overrides
            task, hydra_overrides = list(ovr.task), list(ovr.hydra)
        kept = [o for o in [*task, *hydra_overrides] if override_key(o) not in drop and not secret_override(o)]
        return _join(["mltrain", "-m", *kept, "train.resume=true", f"hydra.sweep.dir={hydra_value(sweep)}"])
    kept = [o for o in [*hc.overrides.task, *hc.overrides.hydra] if override_key(o) not in drop and not secret_override(o)]
    return _join(["mltrain", *kept, "train.resume=true", f"hydra.run.dir={hydra_value(run_dir)}"])


# ---------------------------------------------------------------------------------------------
# Stopping on a signal


class StopSignals:
    """While active, SIGINT, SIGTERM, SIGUSR1 and SIGHUP ask the run to stop after the current optimizer step
    (`requested()`), instead of killing it mid-step. So does SIGUSR2 where a Python handler already has
    it: submitit's, which requeues a SLURM job; `hand_on()` calls such a previous handler once the
    checkpoint is written. A second SIGINT stops at once (KeyboardInterrupt); a repeated SIGTERM,
    SIGUSR1 or SIGHUP (a scheduler insisting, a terminal closing) changes nothing. Outside the main thread, where Python cannot
    install handlers, it does nothing."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: dict[int, Any] = {}
        self._handed_on: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        wanted = list(SIGNALS)
        if callable(signal.getsignal(signal.SIGUSR2)):
            wanted.append(signal.SIGUSR2)
        for sig in wanted:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._handed_on, self._previous = dict(self._previous), {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt

    def requested(self) -> bool:
        return self.signum is not None

    def hand_on(self) -> None:
        """Call the handler the stopping signal had before (a scheduler's: submitit requeues the job and
        exits), if it was a Python function; Python's own SIGINT handler is not called."""
        if self.signum is None:
            return  # no stopping signal came
        previous = self._handed_on.get(self.signum) or self._previous.get(self.signum)
        if callable(previous) and previous is not signal.default_int_handler:
            previous(self.signum, None)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "no signal"

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)  # the shell's convention: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP


def say(message: str) -> None:
    """One line on stderr that goes to no log file (for a run dir that must stay as it is); a terminal
    that is gone (SIGHUP) loses the line, not the run's last steps."""
    try:
        print(f"mltrain: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass

