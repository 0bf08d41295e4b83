"""Token shards in the llm.c / modded-nanogpt format (`data.source=shards`).

One shard file:

    header   256 x int32 little-endian (1024 bytes): [0] magic 20240520, [1] version 1,
             [2] number of tokens N, the rest zero
    body     N x uint16 little-endian token ids

A folder of shards: every `*.bin`, sorted by name. Validation is the shard(s) whose name has a word
starting with `val` (`fineweb_val_000000.bin`, `val.bin`, `validation.bin`; not `interval.bin`), else
the first shard; the rest is training data. Shards are memory-mapped, never read whole. Every shard's header and size are checked
on each load; its largest token id is scanned (in chunks) once and remembered by its name and identity
(size, mtime, ctime, inode: data/inputs.py) in
`.mltrain_shards.json` beside the shards when the folder is writable, so huge folders load instantly.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Mapping

import numpy as np

from mltrain.core import atomic
from mltrain.data import inputs
from mltrain.core.errors import DataError

log = logging.getLogger(__name__)

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")
SIDECAR = ".mltrain_shards.json"

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


def check_vocab(folder: Path, shards: Mapping[Path, np.ndarray], vocab_size: int, tokenizer: str) -> None:
    """DataError naming the shard when any id is >= vocab_size. Scans only shards not seen before."""
    known = _load_sidecar(folder)
    changed = False
    for path, tokens in shards.items():
        ident = inputs.file_identity(path)  # size, mtime, ctime, inode: a shard rewritten in place is scanned again
        entry = known.get(path.name)
        remembered = None
        if isinstance(entry, dict) and all(entry.get(k) == v for k, v in ident.items()) and "max_token" in entry:
            remembered = (int(entry["max_token"]), int(entry.get("position", -1)))
        top, where = inputs.check_token_ids(tokens, vocab_size, str(path), tokenizer, known=remembered)
        if remembered is None:
            known[path.name] = {**ident, "max_token": top, "position": where}
            changed = True
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
