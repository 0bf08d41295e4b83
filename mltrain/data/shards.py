"""Token shards in the llm.c / modded-nanogpt format (`data.source=shards`).

One shard file:

    header   256 x int32 little-endian (1024 bytes): [0] magic 20240520, [1] version 1,
             [2] number of tokens N, the rest zero
    body     N x uint16 little-endian token ids

A folder of shards: every `*.bin`, sorted by name. Validation is the shard(s) whose name has a word
starting with `val` (`fineweb_val_000000.bin`, `val.bin`, `validation.bin`; not `interval.bin`), else
the first shard; the rest is training data. Shards are memory-mapped, never read whole. Every shard's header and size are checked
on each load; its largest token id is scanned (in chunks) once and remembered by (name, size, mtime) in
`.mltrain_shards.json` beside the shards when the folder is writable, so huge folders load instantly.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import numpy as np

from mltrain import atomic
from mltrain.errors import DataError

log = logging.getLogger(__name__)

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")
SIDECAR = ".mltrain_shards.json"
SCAN_CHUNK = 1 << 24  # tokens per chunk of the max-id scan (32 MiB of uint16)

_VAL_NAME = re.compile(r"(?<![a-z])val")  # val, valid, validation at a word start; not "interval"


def header(n_tokens: int) -> np.ndarray:
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[0], h[1], h[2] = MAGIC, VERSION, n_tokens
    return h


def write_shard(path: str | os.PathLike, tokens: np.ndarray) -> None:
    """Write one shard atomically (temporary file + rename). Tokens must fit in uint16."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 65535):
        raise DataError(f"{path}: token ids must be in [0, 65535] for uint16 shards")
    with atomic.atomic_open(path, "wb") as f:
        f.write(header(len(tokens)).tobytes())
        f.write(np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE).tobytes())


def read_shard(path: str | os.PathLike) -> np.memmap:
    """Memory-map one shard's tokens after checking its header and size. DataError names the file."""
    path = Path(path)
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise DataError(f"{path}: {size} bytes is shorter than the 1024-byte shard header (truncated?)")
    h = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if int(h[0]) != MAGIC:
        raise DataError(
            f"{path}: magic number {int(h[0])} is not {MAGIC}: not an llm.c token shard "
            f"(remove it from the folder, or re-make the shards with mltrain-prepare)"
        )
    if int(h[1]) != VERSION:
        raise DataError(f"{path}: shard version {int(h[1])} is not supported (only version {VERSION}, uint16 tokens)")
    n = int(h[2])
    expected = HEADER_BYTES + TOKEN_DTYPE.itemsize * n
    if n < 0 or size != expected:
        raise DataError(
            f"{path}: header says {n:,} tokens, so {expected:,} bytes, but the file has {size:,} bytes "
            f"(truncated or corrupt; re-make it with mltrain-prepare)"
        )
    if n == 0:
        raise DataError(f"{path}: the shard holds no tokens; delete it")
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(n,))


def max_token(tokens: np.ndarray) -> tuple[int, int]:
    """(largest id, position of its first occurrence) with a chunked scan that keeps memory flat."""
    best, where = -1, -1
    for start in range(0, len(tokens), SCAN_CHUNK):
        chunk = np.asarray(tokens[start : start + SCAN_CHUNK])
        m = int(chunk.max())
        if m > best:
            best, where = m, start + int(np.argmax(chunk))
    return best, where


def find_shards(folder: Path) -> tuple[list[Path], list[Path]]:
    """(train, val) shard paths of `folder`, each sorted by name. Assumes at least one shard."""
    shards = sorted(p for p in folder.glob("*.bin") if p.is_file())
    val = [p for p in shards if _VAL_NAME.search(p.stem.lower())] or shards[:1]
    train = [p for p in shards if p not in val]
    if not train:
        raise DataError(
            f"data.dir={str(folder)!r} has only validation shards ({', '.join(p.name for p in val)}); "
            f"it needs at least one training shard besides them"
        )
    return train, val


def _load_sidecar(folder: Path) -> dict:
    try:
        data = json.loads((folder / SIDECAR).read_text())
        return data["shards"] if data.get("version") == 1 else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def check_vocab(folder: Path, shards: dict[Path, np.ndarray], vocab_size: int, tokenizer: str) -> None:
    """DataError naming the shard when any id is >= vocab_size. Scans only shards not seen before."""
    known = _load_sidecar(folder)
    changed = False
    for path, tokens in shards.items():
        st = path.stat()
        ident = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        entry = known.get(path.name)
        if entry and all(entry.get(k) == v for k, v in ident.items()) and "max_token" in entry:
            top, where = int(entry["max_token"]), int(entry.get("position", -1))
        else:
            top, where = max_token(tokens)
            known[path.name] = {**ident, "max_token": top, "position": where}
            changed = True
        if top >= vocab_size:
            raise DataError(
                f"{path}: token id {top} (at position {where:,}) is >= {vocab_size}, the vocabulary size "
                f"of data.tokenizer={tokenizer}: these shards were made with another tokenizer; set "
                f"data.tokenizer to the one they were prepared with"
            )
    if changed:
        try:
            atomic.write_json(folder / SIDECAR, {"version": 1, "shards": known})
        except OSError:  # read-only folder: scan again next time
            log.debug("cannot write %s; shard scans will not be remembered", folder / SIDECAR)


def missing_reason(folder: str | os.PathLike) -> str | None:
    """Why `folder` cannot be loaded as shards ("does not exist", "holds no .bin shards"), or None."""
    path = Path(os.path.expanduser(folder))
    if not path.is_dir():
        return "does not exist"
    if not any(path.glob("*.bin")):
        return "holds no .bin shards"
    return None


def load_shard_splits(folder: str, tokenizer_name: str, vocab_size: int) -> tuple[list[np.memmap], list[np.memmap], str]:
    """(train arrays, val arrays, description) of a shard folder. DataError when it holds no shards."""
    path = Path(os.path.expanduser(folder))
    if (reason := missing_reason(path)) is not None:
        raise DataError(f"data.dir={folder!r} {reason}")
    train_paths, val_paths = find_shards(path)
    arrays = {p: read_shard(p) for p in [*train_paths, *val_paths]}
    check_vocab(path, arrays, vocab_size, tokenizer_name)
    train = [arrays[p] for p in train_paths]
    val = [arrays[p] for p in val_paths]
    n_train, n_val = sum(map(len, train)), sum(map(len, val))
    which = ""
    if not any(_VAL_NAME.search(p.stem.lower()) for p in val_paths):
        # No shard is named for validation: say which one is held out, so it is not mistaken for training data.
        which = f"; validation: {val_paths[0].name}, the first shard, as no shard is named *val*"
        log.warning(
            "data.dir=%s has no shard named for validation (e.g. *_val_*.bin): holding out its first shard, "
            "%s (%s tokens), for validation", folder, val_paths[0].name, f"{n_val:,}",
        )  # fmt: skip
    desc = (
        f"shards ({path}: {len(train)} train + {len(val)} val files{which}), {tokenizer_name}: "
        f"{n_train:,} train / {n_val:,} val tokens"
    )
    return train, val, desc
