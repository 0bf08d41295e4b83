"""A run owns its directory for its whole life, and default directories never collide.

* `claim(path)` refuses a directory that holds an earlier run, creates it, and takes an exclusive
  `fcntl.flock` on `<path>/.mltrain.lock` that is held until `release()` (or the end of the process).
  The kernel drops the lock when the process dies, even by SIGKILL, so a killed run never leaves a
  stale lock behind; a second run into the same directory, started at the same moment in another
  process, is refused with one line instead of interleaving its rows with the first one's. Claims in
  one process nest (the CLI's RunGuard claims before Hydra writes `.hydra/`, `run()` claims again).
* `unique_dir(base)` is the `mltrain_unique_dir` resolver of conf/config.yaml: the default run and
  sweep directories (`outputs/<date>/<time>`) are claimed with an atomic `mkdir`, and a name already
  taken (another run started in the same second) gets a suffix `-1`, `-2`, ...
* `earlier_run(path)` / `earlier_sweep(path)`: the file that shows a directory already holds a run
  (or a sweep's runs), or None. Nothing is written before these checks, so a refusal leaves the
  earlier run byte for byte as it was.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import sys
from pathlib import Path
from typing import IO, Callable, Optional

from mltrain.core.errors import ConfigError, StorageError
from mltrain.core.atomic import link_message, open_no_follow

LOCK_FILE = ".mltrain.lock"
RUN_FILES = ("summary.json", "metrics.jsonl", "checkpoints")  # what a run writes once it has started training
# Everything mltrain or Hydra writes into a run or sweep dir, by name (a `*.log` file too): none of them
# may be a symbolic link, and neither may anything inside the folders among them that mltrain owns.
WRITTEN_NAMES = (LOCK_FILE, *RUN_FILES, "model.safetensors", "model.json", "wandb", ".hydra", "multirun.yaml",
                 ".gpu_locks")
OWN_FOLDERS = (".hydra", "checkpoints", ".gpu_locks")

_held: dict[str, list] = {}  # realpath -> [open lock file, nesting count]
_chosen: dict[str, str] = {}  # unique_dir: absolute base -> the directory this process claimed


def earlier_run(path: str | os.PathLike) -> Optional[Path]:
    path = Path(path)
    for name in RUN_FILES:
        if (path / name).exists():
            return path / name
    return None


def earlier_sweep(path: str | os.PathLike) -> Optional[Path]:
    """Evidence of an earlier sweep in `path`: its multirun.yaml, or a job directory that Hydra or a
    run has written into (`.hydra/`, metrics.jsonl, summary.json), killed jobs included."""
    path = Path(path)
    if (path / "multirun.yaml").exists():
        return path / "multirun.yaml"
    if path.is_dir():
        for name in (*RUN_FILES, ".hydra"):
            found = next(iter(sorted(path.glob(f"**/{name}"))), None)
            if found is not None:
                return found
    return None


def linked_file(path: str | os.PathLike, depth: int = 1) -> Optional[Path]:
    """The first file mltrain or Hydra would write in the run dir `path` that is a symbolic link, or
    None; with depth 2 (a sweep dir) its job dirs are looked at too."""
    path = Path(path)
    if not path.is_dir():
        return None
    for entry in sorted(path.iterdir()):
        if entry.name in WRITTEN_NAMES or entry.suffix == ".log":
            if entry.is_symlink():
                return entry
            if entry.name in OWN_FOLDERS and entry.is_dir():
                inner = next((p for p in sorted(entry.iterdir()) if p.is_symlink()), None)
                if inner is not None:
                    return inner
        elif depth > 1 and entry.is_dir() and not entry.is_symlink():
            found = linked_file(entry, depth - 1)
            if found is not None:
                return found
    return None


def refuse_linked_files(path: str | os.PathLike, depth: int = 2) -> None:
    """StorageError naming a symbolic link where mltrain or Hydra would write (see linked_file)."""
    try:
        found = linked_file(path, depth)
    except OSError:
        return  # an unreadable folder: the claim that follows says so
    if found is not None:
        raise StorageError(link_message(found))


_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_./\-+:@%]+")


def hydra_value(value: str | os.PathLike) -> str:
    """`value` as a Hydra override value that parses back to itself: as it is when it is plain, else
    single-quoted, with the characters Hydra treats specially inside quotes escaped (a comma, a space,
    parentheses or non-ASCII letters would otherwise be read as a sweep, a function or a syntax error)."""
    text = str(value)
    if _HYDRA_PLAIN.fullmatch(text) and not text[0].isdigit():
        return text
    escaped = re.sub(r"(\\+)(?='|$)", r"\1\1", text)  # backslashes before a quote or at the end double
    return "'" + escaped.replace("'", "\\'").replace("${", "\\${") + "'"


def unproven_run(path: str | os.PathLike) -> Optional[str]:
    """Why the unfinished run in `path` cannot be resumed under any config, or None. Under the CLI every
    run dir has the config Hydra recorded (`.hydra/config.yaml`), which a resume must match: one without
    it is not resumed (Hydra would record the new config there before a checkpoint could object).
    Called from Python (`run(cfg, run_dir)`), a run dir needs it or a checkpoint, which records its own."""
    path = Path(path)
    if (path / ".hydra" / "config.yaml").exists():
        return None
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized() and any((path / "checkpoints").glob("step-*.pt")):
        return None
    return (f"{path} holds an unfinished run without its .hydra/config.yaml: nothing shows which config "
            f"made it, so it is not resumed under this one; choose another dir (nothing was changed)")


def _holder(lock_path: Path) -> str:
    """The process named in the lock file that is alive: the claimant, or a process it handed its claim
    down to (add_holder: a study's sweeps, which outlive a killed study until they stop)."""
    try:
        pids = [int(t) for t in lock_path.read_text().split() if t.isdigit()]
    except OSError:
        return "another process"
    live = [p for p in pids if _alive(p)]
    return f"process {live[-1]}" if live else f"process {pids[0]}" if pids else "another process"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def held_fds() -> list[int]:
    """The open lock files of this process's claims. A child process given them (Popen's pass_fds) holds
    the claims too, while it lives: the kernel drops an flock when the last descriptor of it is closed."""
    return [entry[0].fileno() for entry in _held.values()]


def add_holder(pid: int) -> None:
    """Name `pid` in every lock file this process holds, after the claimant: the process that was handed
    the claims (held_fds), for the line a second run gets."""
    for entry in _held.values():
        with contextlib.suppress(OSError):
            entry[0].seek(0, os.SEEK_END)
            entry[0].write(f"{pid}\n")
            entry[0].flush()


class Claim:
    """One claim on a run directory; `release()` (or leaving a `with` block) gives it back."""

    def __init__(self, key: str, path: Path):
        self.key, self.path, self._released = key, path, False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        entry = _held.get(self.key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _held[self.key]
            entry[0].close()  # closing the file drops the flock

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim(
    path: str | os.PathLike,
    what: str = "hydra.run.dir",
    earlier: Callable[[Path], Optional[Path]] = earlier_run,
    allow_earlier: bool = False,
    holds: str = "an earlier run",
) -> Claim:
    """Own `path` (see the module docstring). ConfigError when it holds an earlier run (unless
    `allow_earlier`, for a resume) or another live run holds it; StorageError when it cannot be created.
    `what` names the key in messages."""
    path = Path(path)
    key = os.path.realpath(path)
    if key in _held:  # this process owns it already (RunGuard, then run())
        _held[key][1] += 1
        return Claim(key, path)

    def refuse_earlier() -> None:
        found = None if allow_earlier else earlier(path)
        if found is not None:
            raise ConfigError(
                f"{found} exists: {what}={path} holds {holds}; choose another {what}, or add train.resume=true "
                f"to continue {'it' if holds == 'an earlier run' else 'its unfinished jobs'} (nothing was changed)"
            )

    refuse_earlier()
    refuse_linked_files(path)
    f = _locked(path, what)
    try:
        refuse_earlier()  # a run that finished between the first check and the lock
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")  # who holds it, for the message a second run gets
        f.flush()
    except OSError as err:
        f.close()
        if isinstance(err, StorageError):
            raise
        raise StorageError(f"cannot write {path / LOCK_FILE}: {_reason(err)}") from None
    except BaseException:
        f.close()
        raise
    _held[key] = [f, 1]
    return Claim(key, path)


def _locked(path: Path, what: str) -> IO:
    """`path` created and its lock file open (never through a link) and exclusively locked. StorageError
    when that cannot be done, ConfigError when another live run holds the lock."""
    lock_path = path / LOCK_FILE
    try:
        path.mkdir(parents=True, exist_ok=True)
        f = os.fdopen(open_no_follow(lock_path, os.O_RDWR | os.O_CREAT), "r+")
    except OSError as err:
        if isinstance(err, StorageError):
            raise
        raise StorageError(f"cannot create {what}={path}: {_reason(err)}") from None
    try:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # pragma: no cover - no flock (Windows): the start-up checks alone
        pass
    except OSError as err:
        f.close()
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StorageError(f"cannot lock {lock_path}: {_reason(err)}") from None
        raise ConfigError(
            f"{what}={path} is in use by another mltrain run ({_holder(lock_path)}); wait for it to "
            f"finish or choose another {what} (nothing was changed)"
        ) from None
    return f


def holds(path: str | os.PathLike) -> bool:
    """True when this process has claimed `path`."""
    return os.path.realpath(path) in _held


def live_holder(path: str | os.PathLike) -> Optional[int]:
    """The process that holds `path`'s claim now (a live run, or a live study), or None when no live
    process does. Read from the kernel's table of locks (/proc/locks), so looking takes no lock and
    never disturbs a run that is starting; where that table cannot be read, a shared lock tried and
    dropped at once tells it (the holder is then given as 0)."""
    lock_path = Path(path) / LOCK_FILE
    try:
        st = os.lstat(lock_path)
    except OSError:
        return None
    this = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks") as f:
            table = f.read().splitlines()
    except OSError:
        return _tried_lock(lock_path)
    for line in table:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":  # waiters ("-> FLOCK") hold nothing
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == this:
                return int(fields[4])
        except ValueError:
            continue
    return None


def _tried_lock(lock_path: Path) -> Optional[int]:
    import fcntl

    try:
        fd = open_no_follow(lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except OSError:
        return 0
    finally:
        os.close(fd)


def unique_dir(base: str) -> str:
    """`base`, or `base-1`, `base-2`, ... : the first that this process could create (atomic mkdir).

    The same base gives the same answer for the whole process, however often Hydra resolves it. A
    folder that cannot be created at all (read-only working directory) is returned as it is: the
    claim that follows reports it in one line. Folders made here that are still empty when the
    process ends (a refused run, `--cfg hydra --resolve`) are removed again."""
    key = os.path.abspath(base)
    if key not in _chosen:
        _chosen[key] = _agreed_by_ranks(lambda: _claim_unique(base))
    return _chosen[key]


def _agreed_by_ranks(choose: Callable[[], str]) -> str:
    """`choose()`, made by rank 0 alone and broadcast when this process is one rank of a data-parallel
    job (distributed.prepare_launch joined the group before Hydra resolves the dir): every rank then
    names the same directory, where each choosing for itself would give rank 1 the `-1` suffix."""
    dist = sys.modules.get("torch.distributed")  # never imported here: only a launched job has it set up
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return choose()
    chosen = [choose() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(chosen, src=0)
    return str(chosen[0])


def _claim_unique(base: str) -> str:
    candidate = base
    for i in range(1, 10_000):
        made = _missing_parents(candidate)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(candidate)), exist_ok=True)
            os.mkdir(candidate)
        except FileExistsError:
            candidate = f"{base}-{i}"
            continue
        except OSError:
            break
        atexit.register(_remove_if_empty, [os.path.abspath(candidate), *made])
        break
    return candidate


def _missing_parents(path: str) -> list[str]:
    parents, p = [], os.path.dirname(os.path.abspath(path))
    while p and not os.path.exists(p):
        parents.append(p)
        p = os.path.dirname(p)
    return parents


def _remove_if_empty(folders: list[str]) -> None:
    for folder in folders:  # the run dir first, then the parents made for it
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only ever removes an empty folder


def _reason(err: OSError) -> str:
    return err.strerror or str(err)
