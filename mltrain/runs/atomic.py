"""Atomic file writes: a temporary file in the destination folder, then `os.replace`.

A run killed half-way leaves at worst a stray temporary file (named `.<name>.<random>.tmp`, which no
reader looks at), never a truncated file under the final name that a later run would trust.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

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
