"""Local text files (`data.source=text`): finding them, fingerprinting them and reading them.

`data.path` is a file, a directory (every *.txt and *.md below it, recursively, hidden folders such
as .git/ skipped) or a glob (`**` allowed). Files are read through the `datasets` library's local `text` builder, one document per
file (`sample_by="document"`, streaming, so nothing is copied into an Arrow cache). The read is kept
strictly local: `datasets`' Hub access is switched off for the duration of the call only.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import logging
import os
from pathlib import Path
from typing import Iterator

from mltrain.data import inputs
from mltrain.core.errors import DataError

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".txt", ".md")
MAX_NOT_TEXT = inputs.MAX_NOT_TEXT  # the share of undecodable or control characters that makes a file not text


def check_is_text(text: str, path: Path | str, allow: bool) -> bool:
    """False (after a warning) or DataError when `text` read from `path` is not text; True when it is
    (a few undecodable bytes: one warning). The rule every entry point shares: data/inputs.py."""
    return inputs.judge_text(text, path, allow)


def resolve_files(path: str) -> list[Path]:
    """The files `data.path` names, sorted; DataError naming the path when there are none."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = [
            f for f in p.rglob("*")
            if f.suffix.lower() in TEXT_SUFFIXES and f.is_file()
            and not any(part.startswith(".") for part in f.relative_to(p).parts)  # .git/, .venv/, ...
        ]  # fmt: skip
    elif glob.has_magic(str(p)):
        files = [Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file()]
    else:
        files = []
    if not files:
        what = "folder has no *.txt or *.md files" if p.is_dir() else "matches no files"
        raise DataError(
            f"data.path={path!r} {what}. Give a text file, a folder of *.txt/*.md files, "
            f"or a quoted glob such as data.path='corpus/**/*.txt'."
        )
    return sorted(f.resolve() for f in files)


def document_names(files: list[Path]) -> list[str]:
    """Stable document names: paths relative to the files' common folder (independent of where it lives)."""
    if len(files) == 1:
        return [files[0].name]
    common = Path(os.path.commonpath([str(f.parent) for f in files]))
    return [f.relative_to(common).as_posix() for f in files]


def fingerprint(files: list[Path]) -> str:
    """Identity of the files without reading them (a large corpus is not re-read at every start-up):
    resolved path, name relative to their common folder, and the file's identity (data/inputs.py: size,
    mtime, ctime, inode; a file rewritten in place with its old size and mtime put back is read again)."""
    h = hashlib.sha256(b"text v3\n")
    for name, f in zip(document_names(files), files):
        ident = inputs.file_identity(f)
        h.update(f"{f.resolve()}\0{name}\0{ident['size']}\0{ident['mtime_ns']}\0{ident['ctime_ns']}\0"
                 f"{ident['inode']}\0".encode())
    return h.hexdigest()


@contextlib.contextmanager
def datasets_local_only() -> Iterator[None]:
    """Inside: `datasets` makes no network call (no Hub lookup, no download-count ping). Restored after."""
    import datasets

    cfg = datasets.config
    saved = (cfg.HF_HUB_OFFLINE, cfg.HF_DATASETS_OFFLINE, cfg.HF_UPDATE_DOWNLOAD_COUNTS)
    cfg.HF_HUB_OFFLINE = cfg.HF_DATASETS_OFFLINE = True
    cfg.HF_UPDATE_DOWNLOAD_COUNTS = False
    try:
        yield
    finally:
        cfg.HF_HUB_OFFLINE, cfg.HF_DATASETS_OFFLINE, cfg.HF_UPDATE_DOWNLOAD_COUNTS = saved


def read_documents(files: list[Path], cache_dir: str | os.PathLike) -> Iterator[str]:
    """Yield each file's whole text (UTF-8; undecodable bytes become U+FFFD), in the order given."""
    import datasets

    with datasets_local_only():  # only the set-up can reach for the network; iterating local files cannot
        ds = datasets.load_dataset(
            "text",
            data_files=[str(f) for f in files],
            sample_by="document",
            encoding_errors="replace",
            split="train",
            streaming=True,
            cache_dir=str(Path(cache_dir) / "hf_datasets"),
        )
    n = 0
    for row in ds:
        n += 1
        yield row["text"]
    if n != len(files):  # one row per file is the builder's contract; guard the doc <-> name pairing
        raise DataError(f"datasets' text builder returned {n} documents for {len(files)} files under data.path")
