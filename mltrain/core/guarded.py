"""The one writer every tool uses for its own files (study reports, comparisons, exports, prepared
data's logs): nothing is ever written through a symbolic link, and a write that fails is one line.

    guarded.write_text(root / "ladder.md", text, root=root)
    guarded.write_figure(fig, root / "ladder.png", root=root, dpi=120)

`root` is the folder the user named (a study's `dir=`, `mltrain-compare --out`, an export's OUT): it is
taken as it is, a link included, since the user chose it. Everything the tool makes below it, each
folder on the way down and the file itself, must not be a symbolic link: a link there (planted, or
left by hand) would send the tool's writes outside the folder, so it is refused with StorageError
naming it, before anything is written. Files are written atomically (mltrain/core/atomic.py): a temporary file
beside the final one, then a rename, so a reader never sees half a file and a killed writer leaves no
truncated one. A write the disk, a quota or a permission refuses is StorageError naming the file and
the reason (a full disk is said as one), never a traceback.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional

from mltrain.core.errors import MltrainError, StorageError
from mltrain.core import atomic


def linked_below(root: str | os.PathLike, path: str | os.PathLike) -> Optional[Path]:
    """The first of `path`'s components below `root` (root itself excluded, `path` included) that is a
    symbolic link, or None. A `path` not below `root` is looked at from its own parent folder."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    try:
        parts = path.relative_to(root).parts
        here = root
    except ValueError:
        parts, here = (path.name,), path.parent
    for part in parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


def refuse_linked(paths: Iterable[str | os.PathLike], root: str | os.PathLike) -> None:
    """StorageError naming the first link on the way from `root` down to any of `paths` (see linked_below)."""
    for path in paths:
        found = linked_below(root, path)
        if found is not None:
            raise StorageError(atomic.link_message(found))


def storage_error(path: str | os.PathLike, err: OSError, kept: str = "") -> StorageError:
    """A failed write as the one line a user acts on: which file, and why (full disk, no permission)."""
    where = err.filename or path
    return StorageError(f"cannot write {where} ({atomic.full_or_denied(err)})" + (f"; {kept}" if kept else ""))


def make_dirs(path: str | os.PathLike, root: Optional[str | os.PathLike] = None) -> Path:
    """`path` and its missing parents, none of them a link below `root` (default: `path`'s parent)."""
    path = Path(path)
    refuse_linked([path], root if root is not None else path.parent)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(path, err) from None
    refuse_linked([path], root if root is not None else path.parent)  # a link made while it was created
    return path


def write_bytes(path: str | os.PathLike, data: bytes, root: Optional[str | os.PathLike] = None, kept: str = "") -> Path:
    """`data` into `path`, atomically, never through a link below `root` (default: `path`'s folder).
    `kept`: what the error line adds about what is left (e.g. "the other reports were written")."""
    path = Path(path)
    make_dirs(path.parent, root)
    refuse_linked([path], root if root is not None else path.parent)
    try:
        atomic.write_bytes(path, data)
    except MltrainError:
        raise
    except OSError as err:
        raise storage_error(path, err, kept) from None
    return path


def write_text(path: str | os.PathLike, text: str, root: Optional[str | os.PathLike] = None, kept: str = "") -> Path:
    return write_bytes(path, text.encode("utf-8"), root, kept)


def write_json(path: str | os.PathLike, obj: Any, root: Optional[str | os.PathLike] = None, indent: int = 1,
               default: Any = None, kept: str = "") -> Path:
    import json

    text = json.dumps(obj, indent=indent, sort_keys=True, default=default) + "\n"
    return write_text(path, text, root, kept)


def write_figure(fig: Any, path: str | os.PathLike, root: Optional[str | os.PathLike] = None, dpi: int = 120,
                 kept: str = "") -> Path:
    """A matplotlib figure as the image file `path` (its format from the suffix): drawn into a folder of
    its own made beside `path` (under the same name), then renamed into place, so a full disk costs no
    half-written image and the drawing never follows a link."""
    path = Path(path)
    make_dirs(path.parent, root)
    refuse_linked([path], root if root is not None else path.parent)
    try:
        scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=atomic.TMP_SUFFIX))
    except OSError as err:
        raise storage_error(path, err, kept) from None
    try:
        fig.savefig(scratch / path.name, dpi=dpi)
        os.replace(scratch / path.name, path)
    except OSError as err:  # named as the file it was to be, not the scratch folder
        raise storage_error(path, OSError(err.errno, err.strerror or str(err)), kept) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path
