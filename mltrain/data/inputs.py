"""One judgment of input data for every entry point (`data=text`, `data=shards`, the token cache,
`mltrain-prepare`, the batches a run draws): the same input is taken, warned about or refused the same
way wherever it comes in, in one line that names the file and the key.

* `check_files(files, key)`: every input file is a file with something in it (an empty `.jsonl` is
  named, not a `StopIteration` from deep inside `datasets`).
* `judge_text(text, path, allow, key, allow_key)`: text read with undecodable bytes replaced (U+FFFD):
  refused when more than MAX_NOT_TEXT of it is not text (binary data), else taken with one warning that
  says how many bytes could not be decoded; never silently (data/text.py's rule, for prepare too).
* `check_token_ids(tokens, vocab_size, where, ...)`: a token id at or beyond the vocabulary would crash
  the embedding lookup mid-run (IndexError) or train on rows no tokenizer makes: DataError naming
  where, before training.
* `file_identity(path)`: what a cached judgment of a file is keyed by: size, mtime, ctime and inode.
  The ctime cannot be set back by hand (`touch -r`, `os.utime`), so a file rewritten in place to the
  same size and mtime is judged again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from mltrain.core.errors import DataError

log = logging.getLogger("mltrain.data")

SCAN_CHUNK = 1 << 24  # tokens per chunk of a max-id scan (32 MiB of uint16): memory stays flat
# A text is "not text" when more than this share of its characters are undecodable UTF-8 (read as
# U+FFFD) or control characters other than tab, newline, carriage return and form feed: binary formats
# (token shards, archives, images) are full of NUL bytes, which are valid UTF-8. Real text has ~0.
MAX_NOT_TEXT = 0.01
_CONTROL = bytes(c for c in range(32) if chr(c) not in "\t\n\r\f")


def check_files(files: Iterable[Path], key: str) -> None:
    """DataError naming the first of `files` (given as `key`) that is empty or not a readable file."""
    for f in files:
        try:
            size = os.stat(f).st_size
        except OSError as err:
            raise DataError(f"{key}: cannot read {f} ({err.strerror or err})") from None
        if size == 0:
            raise DataError(f"{key}: {f} is empty (0 bytes): it holds no documents; remove it or give another file")


def not_text_share(text: str) -> tuple[int, int, int]:
    """(characters text does not contain: U+FFFD and control characters, of them U+FFFD, length)."""
    raw = text.encode("utf-8", errors="surrogatepass")
    controls = len(raw) - len(raw.translate(None, _CONTROL))
    replaced = text.count("\ufffd")
    return replaced + controls, replaced, len(text)


def judge_text(text: str, path: Path | str, allow: bool, key: str = "data.path",
               allow_key: str = "data.allow_binary") -> bool:
    """True when `text` (read from `path`) is text; False, after a warning, when it is not but `allow`;
    DataError when it is not. Text with a few undecodable bytes is taken, with one warning."""
    bad, replaced, n = not_text_share(text)
    if n and bad > MAX_NOT_TEXT * n:
        share = f"{bad:,} of its {n:,} characters ({bad / n:.1%}) are undecodable UTF-8 or control bytes"
        if allow:
            log.warning("%s is not UTF-8 text (%s); taking it anyway (%s=true)", path, share, allow_key)
            return False
        raise DataError(f"{key}: {path} is not UTF-8 text: {share}. Give text files (convert other encodings to "
                        f"UTF-8), or set {allow_key}=true to take it anyway")
    if replaced:
        log.warning("%s: %s character%s could not be decoded as UTF-8 and %s read as U+FFFD (below the %.0f%% that "
                    "makes a file not text)", path, f"{replaced:,}", "s" if replaced > 1 else "",
                    "were" if replaced > 1 else "was", 100 * MAX_NOT_TEXT)
    return True


def max_token(tokens: np.ndarray) -> tuple[int, int]:
    """(largest id, position of its first occurrence) with a chunked scan that keeps memory flat."""
    best, where = -1, -1
    for start in range(0, len(tokens), SCAN_CHUNK):
        chunk = np.asarray(tokens[start : start + SCAN_CHUNK])
        if not chunk.size:
            continue
        m = int(chunk.max())
        if m > best:
            best, where = m, start + int(np.argmax(chunk))
    return best, where


def out_of_vocabulary(where: str, top: int, position: int, vocab_size: int, tokenizer: str) -> DataError:
    at = f" (at position {position:,})" if position >= 0 else ""
    return DataError(
        f"{where}: token id {top}{at} is >= {vocab_size}, the vocabulary size of data.tokenizer={tokenizer}: "
        f"made with another tokenizer, or changed since; set data.tokenizer to the one it was prepared with, or "
        f"make it again"
    )


def check_token_ids(tokens: np.ndarray, vocab_size: int, where: str, tokenizer: str,
                    known: Optional[tuple[int, int]] = None) -> tuple[int, int]:
    """(largest id, its position) of `tokens`, scanned unless `known`; DataError when it is >= vocab_size."""
    top, position = known if known is not None else max_token(tokens)
    if top >= vocab_size:
        raise out_of_vocabulary(where, top, position, vocab_size, tokenizer)
    return top, position


def file_identity(path: Path) -> dict:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}
