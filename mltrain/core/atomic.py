"""Atomic file writes: a temporary file in the destination folder, then `os.replace`; and files written
in place (a lock, an append-only log) opened without following symbolic links.

A run killed half-way leaves at worst a stray temporary file (named `.<name>.<random>.tmp`, which no
reader looks at), never a truncated file under the final name that a later run would trust.

No write goes through a symbolic link: `os.replace` replaces a link by the new file (the link's target
is never touched), and a file written in place is opened with O_NOFOLLOW; a link where mltrain keeps
its own file is refused with StorageError, naming it (in a shared folder a planted link would
otherwise let a run truncate or append to any file its user can write).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from mltrain.core.errors import ConfigError, StorageError

TMP_SUFFIX = ".tmp"
# mkstemp creates 0600 files; finished files get the usual 0666 & ~umask (shared data folders stay readable).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to `path`; on a clean exit, flush, fsync and rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike, data: bytes | memoryview) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_json(path: str | os.PathLike, obj: Any, indent: int = 1, default: Any = None) -> None:
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=indent, sort_keys=True, default=default)
        f.write("\n")


def remove_stale_temps(folder: str | os.PathLike) -> int:
    """Delete temporaries left by killed writers in `folder`; return how many."""
    n = 0
    for p in Path(folder).glob(f".*{TMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            p.unlink()
            n += 1
    return n


# ---------------------------------------------------------------------------------------------
# Links and in-place writes


def link_message(path: str | os.PathLike) -> str:
    return (f"{path}: it is a symbolic link, and mltrain writes its own files only, never through a link "
            f"(remove the link or choose another folder; nothing was changed)")


def refuse_links(paths: Iterable[str | os.PathLike]) -> None:
    """StorageError naming the first of `paths` that is a symbolic link (a missing path is fine)."""
    for path in paths:
        if os.path.islink(path):
            raise StorageError(link_message(path))


def open_no_follow(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags)` that refuses a symbolic link at `path` (StorageError naming it)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.EMLINK and os.path.islink(path)):
            raise StorageError(link_message(path)) from None
        raise


def full_or_denied(err: OSError) -> str:
    """Why a write failed, in the words a user acts on: a full disk (or file-size limit), a folder that
    refuses writes, or the system's own words for anything else."""
    reason = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return f"{reason}: the disk, the quota or the file-size limit is full"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{reason}: the folder does not allow this process to write there"
    return reason


def _rows_problem(fd: int, keep_bytes: int, keep_rows: int) -> str:
    """How the file open at `fd` fails to begin with `keep_rows` whole lines in `keep_bytes` bytes ("" when
    it does)."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, keep_bytes, 0) if keep_bytes else b""
    whole = len(head) == keep_bytes and (keep_bytes == 0 or head.endswith(b"\n"))
    lines = head.count(b"\n")
    if size < keep_bytes:
        return f"has {size:,} bytes, fewer than the {keep_bytes:,} it had at the last checkpoint"
    if not whole or lines != keep_rows:
        return (f"does not begin with the {keep_rows:,} whole rows it had at the last checkpoint (its first "
                f"{keep_bytes:,} bytes hold {lines:,} line ends{'' if whole else ', the last row cut'})")
    return ""


def cut_at_row(path: str | os.PathLike, keep_bytes: int, keep_rows: int, check_only: bool = False) -> None:
    """Cut the append-only JSON-lines file `path` back to its first `keep_bytes` bytes, which must be
    exactly `keep_rows` whole lines (what a checkpoint recorded). Anything else means the file is not
    the one the checkpoint saw: ConfigError, and the file is left as it is. `check_only`: only check."""
    try:
        fd = open_no_follow(path, os.O_RDONLY if check_only else os.O_RDWR)
    except FileNotFoundError:
        if keep_bytes == 0:
            return
        fd = os.open(os.devnull, os.O_RDONLY)  # no file: the check below refuses with the sizes
    try:
        problem = _rows_problem(fd, keep_bytes, keep_rows)
        if problem:
            raise ConfigError(f"{path} {problem}: it was changed since, so the run cannot continue it "
                              f"(nothing was changed)")
        if not check_only:
            os.ftruncate(fd, keep_bytes)
    finally:
        os.close(fd)
