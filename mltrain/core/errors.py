"""The errors mltrain reports to a user in one line (exit status 2), never as a traceback.

Each names the key or the file at fault and what to do. Everything else that goes wrong is a bug and
keeps its traceback. This module imports only the standard library (Hydra and OmegaConf only inside the
functions that read their errors, when a Hydra tool starts), so every layer (config, coarsening, data)
can raise these without importing each other.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import logging
import sys
from typing import Any, Callable, Iterator, Literal, Optional, Sequence


class MltrainError(Exception):
    """Known bad input or environment; the message is the whole story."""


class ConfigError(MltrainError, ValueError):
    """A configuration that type-checks but cannot run. The message says which key and why."""


class CoarseningError(ConfigError):
    """A coarsening scheme that cannot coarsen this model (depth not divisible, k < 2, unknown scheme)."""


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed here: unreadable, or made by another model, scheme or plan."""


class DataError(MltrainError, RuntimeError):
    """Missing or unusable data: files, shards, tokenizer files. The message says what to do."""


class CompareError(MltrainError):
    """Bad input for `mltrain-compare` (no runs, no baseline, unreadable files): one line, exit status 1."""


class StorageError(MltrainError, OSError):
    """A file or folder mltrain must write cannot be written (read-only, full disk, file-size limit).
    The message names the path and says what was kept."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message, the form every one-line report quotes it in; for a wrapper
    with an empty message (datasets' DatasetGenerationError), its cause's."""
    for e in (err, err.__cause__, err.__context__):
        text = str(e or "").strip()
        if text:
            return text.splitlines()[0]
    return ""


_NO_MEMORY = ("bad_alloc", "can't allocate memory", "out of memory", "Cannot allocate memory")


def out_of_memory(err: BaseException) -> bool:
    """Whether `err` is the process running out of memory (Python's MemoryError, or an allocator's
    RuntimeError: torch's `DefaultCPUAllocator: can't allocate memory`, `std::bad_alloc`, CUDA's)."""
    return isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and any(s in str(err) for s in _NO_MEMORY))


def memory_message(err: BaseException) -> str:
    said = first_line(err)
    return ("ran out of memory" + (f" ({said[:200]})" if said else "") + ": the model, or what was asked of it, "
            "needs more memory than this process may use here (a memory limit, or other programs); free some, "
            "or ask for less")


_OS_HINTS = {
    errno.ENAMETOOLONG: "a file or folder name there is too long for this file system: choose a shorter one",
    errno.ENOSPC: "the disk is full: free some space, or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free some space, or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "no permission: write elsewhere, or change the folder's permissions",
}


def os_error_line(err: OSError) -> str:
    """An operating-system error (a name too long, a full disk, a read-only folder) as one line: the file,
    the system's words and what to do."""
    where = f"{err.filename}: " if err.filename else ""
    said = err.strerror or first_line(err) or type(err).__name__
    hint = _OS_HINTS.get(err.errno or 0)
    return f"{where}{said}" + (f" ({hint})" if hint else "")


def override_line(override: str, said: str) -> str:
    """An override Hydra's grammar cannot read, as one line with the way to quote its value."""
    key, eq, value = override.partition("=")
    quoted = f"'{key}=\"{value}\"'" if eq else f"'\"{override}\"'"
    return (f"cannot parse override {override!r} ({said}): quote a value with spaces, non-ASCII letters or "
            f"characters such as ()[]{{}}:,= for Hydra, inside the shell's quotes: {quoted}")


def _override_key(override: str) -> str:
    """The key or config group an override sets: `+train.seed=1` -> train.seed, `model@m=gpt` -> model."""
    return override.split("=", 1)[0].lstrip("+~").split("@", 1)[0]


# Keys this version no longer has, and what replaced them: said in the one line that refuses them.
RETIRED_KEYS = {
    "train.eval_batches": "train.eval_batches is gone: the held-out set is train.eval_tokens tokens "
                          "(e.g. train.eval_tokens=32768), the same whatever train.batch_size",
}


def _nearest_key(err: BaseException) -> str:
    """`; did you mean <key>?` for a key OmegaConf found no field of (a misspelt key), or ''; for a
    retired key, what replaced it."""
    import dataclasses
    import difflib

    full_key = str(getattr(err, "full_key", "") or "")
    if full_key in RETIRED_KEYS:
        return "; " + RETIRED_KEYS[full_key]
    section, missing = full_key.rpartition(".")[::2]
    schema = getattr(err, "object_type", None)
    if not missing or not dataclasses.is_dataclass(schema):
        return ""
    close = difflib.get_close_matches(missing, [f.name for f in dataclasses.fields(schema)], n=1)
    return f"; did you mean {section + '.' if section else ''}{close[0]}?" if close else ""


def composition_line(err: BaseException, overrides: Sequence[str]) -> str:
    """A config Hydra cannot compose from `overrides`, as one line that starts with the override at fault:
    `optim.name=lion: invalid value 'lion', expected one of [sgd, adamw]` (OmegaConf's first line, its
    type names left out), `model=gpt99: no model preset 'gpt99' (the model presets: ...)`, a misspelt key
    with the nearest key of its section. An error no override names (a preset's own defaults) keeps
    Hydra's first line, which names the file."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(err, OverrideParseException):
        parsed = [line.strip() for line in str(err).splitlines() if line.strip()]
        return override_line(err.override, parsed[0] if parsed else type(err).__name__)
    cause = err.__cause__ or err.__context__ or err  # OmegaConf's error, raised from or while Hydra's
    lines = [line.strip().rstrip(".") for line in str(err).splitlines() if line.strip()]
    key = str(getattr(cause, "full_key", "") or "")
    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        key, said = group, f"no {group or 'config'} preset {name!r}" + (
            f" (the {group} presets: {', '.join(err.options)})" if err.options else "")
    elif key:
        said = first_line(cause)
        said = said[:1].lower() + said[1:]
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
            said += _nearest_key(cause)
    elif isinstance(err, ConfigCompositionException):  # Hydra's own words: `+key` on a key that exists,
        said = "; ".join(lines) or type(err).__name__  # `~key` on none, with its advice
    else:
        return first_line(err) or type(err).__name__
    at_fault = [o for o in overrides if (key and _override_key(o) == key) or (not key and f"'{_override_key(o)}'" in said)]
    if at_fault:
        return f"{at_fault[-1]}: {said}"
    where = lines[0] if lines else ""  # Hydra's first line names the file: "In 'experiment/x': ..."
    where = where.split(": ", 1)[0] if where.startswith("In '") else where
    named = f"{key}: {said}" if key and not isinstance(err, MissingConfigException) else said
    return named if not where or said.startswith(where) else f"{where}: {named}"


def _full_error() -> bool:
    """Whether Hydra is asked for the full traceback of every error (HYDRA_FULL_ERROR=1): for debugging."""
    import os

    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def _composition_error(err: BaseException) -> bool:
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (ConfigCompositionException, OverrideParseException, OmegaConfBaseException))


def _one_line_composition(prog: str, compose_config: Callable[..., Any]) -> Callable[..., Any]:
    """Hydra's `compose_config`, whose composition errors (a bad override, a missing preset) end in one
    error line (composition_line) and exit status 2, before any run dir exists."""
    @functools.wraps(compose_config)
    def composed(self: Any, config_name: Optional[str], overrides: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        try:
            return compose_config(self, config_name, overrides, *args, **kwargs)
        except Exception as err:
            if _full_error() or not _composition_error(err):
                raise
            report(prog, composition_line(err, list(overrides)))
            sys.exit(2)

    return composed


class _OneLine(contextlib.ContextDecorator):
    """Around a Hydra step: an override Hydra cannot parse, or an operating-system error that is not one
    of ours, becomes one error line and exit status 2. A class, so that the step it decorates runs under
    contextlib's wrapper alone: no frame of ours below it while the run trains."""

    def __init__(self, prog: str):
        self.prog = prog

    def __enter__(self) -> "_OneLine":
        return self

    def __exit__(self, kind: Any, err: Optional[BaseException], tb: Any) -> Literal[False]:
        from hydra.errors import HydraException, OverrideParseException

        if _full_error() and isinstance(err, HydraException):
            return False  # Hydra's own full report
        if isinstance(err, OverrideParseException):
            report(self.prog, composition_line(err, []))
        elif isinstance(err, OSError) and not isinstance(err, MltrainError):
            report(self.prog, os_error_line(err))
        else:
            return False
        sys.exit(2)


# The Hydra steps that parse overrides or write files, each run inside Hydra's own error report.
_HYDRA_STEPS = ("run", "multirun", "show_cfg", "shell_completion")


@contextlib.contextmanager
def hydra_one_line(prog: str) -> Iterator[None]:
    """While a `@hydra.main` entry point runs: a config Hydra cannot compose (an override it cannot parse
    or merge, a misspelt key, a missing preset) and an operating-system error (in Hydra's own writers too:
    the run dir, `.hydra/config.yaml`, the job log) end in one error line and exit status 2 instead of
    Hydra's report. Other errors, and every error under HYDRA_FULL_ERROR=1 but the operating system's,
    keep Hydra's own report. Hydra is imported only here, when the entry point is one of its tools."""
    from hydra._internal.hydra import Hydra

    saved = {name: getattr(Hydra, name) for name in (*_HYDRA_STEPS, "compose_config")}
    one_line = _OneLine(prog)
    for name in _HYDRA_STEPS:
        setattr(Hydra, name, one_line(saved[name]))
    Hydra.compose_config = _one_line_composition(prog, saved["compose_config"])  # type: ignore[method-assign]  # a patch, undone below
    try:
        yield
    finally:
        for name, step in saved.items():
            setattr(Hydra, name, step)


def report(prog: str, message: str, kind: str = "error") -> None:
    """The one error line: `<prog>: <kind>: <message>` on stderr, and the same record in the log files
    of the run (Hydra's FileHandler), so the run's own log says why it stopped."""
    print(f"{prog}: {kind}: {message}", file=sys.stderr, flush=True)
    record = logging.LogRecord(prog, logging.ERROR, __file__, 0, "%s", (message,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            try:
                handler.handle(record)
            except Exception:  # noqa: BLE001 - a full disk must not turn the one line into a traceback
                pass


def tool_main(prog: str, parser: argparse.ArgumentParser, action: Callable[[argparse.Namespace], Optional[int]],
              argv: Optional[Sequence[str]] = None) -> int:
    """The body of a small argparse console tool (`mltrain-sample`, `mltrain-export`): parse `argv`, run
    `action(args)`, and turn bad input (MltrainError) into the one error line; returns the exit status
    (2 for bad input, a usage error or memory that ran out, 0 for --help, else what `action` returns: None
    counts as 0)."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    try:
        return int(action(args) or 0)
    except MltrainError as err:
        report(prog, str(err))
        return 2
    except OSError as err:  # a name too long, a full disk: one line (a closed pipe is the tool's to handle)
        if isinstance(err, BrokenPipeError):
            raise
        report(prog, os_error_line(err))
        return 2
    except (MemoryError, RuntimeError) as err:
        if not out_of_memory(err):
            raise
        report(prog, memory_message(err))
        return 2
