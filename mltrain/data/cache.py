"""Token cache: a corpus is tokenized once, then memory-mapped by every later run.

Layout under `<data.cache_dir>/tokens/`, one entry per (source, content key, tokenizer):

    <source>-<tokenizer>-<key>.train.bin   raw token ids (dtype in the meta file), no header
    <source>-<tokenizer>-<key>.val.bin
    <source>-<tokenizer>-<key>.json        meta: key, dtype, token counts, description

The key is a hash of the content (plus anything else that changes the tokens, e.g. the validation
fraction), so edited data never hits a stale entry. Both .bin files are written atomically first and
the meta file last: an entry without its meta file, or whose sizes disagree with it, is rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from mltrain import atomic
from mltrain.errors import DataError, MltrainError, StorageError

log = logging.getLogger(__name__)

CACHE_VERSION = 1
SPLITS = ("train", "val")


class TokenWriter(Protocol):
    def write(self, tokens: np.ndarray) -> None: ...


class _SplitWriter:
    def __init__(self, f: Any, dtype: np.dtype):
        self.f, self.dtype, self.count = f, dtype, 0

    def write(self, tokens: np.ndarray) -> None:
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        self.f.write(memoryview(tokens).cast("B"))
        self.count += len(tokens)


class TokenCache:
    def __init__(self, cache_dir: str | os.PathLike, source: str, tokenizer: str, key: str):
        self.dir = Path(cache_dir).expanduser() / "tokens"
        self.key = key
        self.stem = f"{source}-{tokenizer}-{key[:24]}"

    @property
    def meta_path(self) -> Path:
        return self.dir / f"{self.stem}.json"

    def split_path(self, split: str) -> Path:
        return self.dir / f"{self.stem}.{split}.bin"

    def load(self) -> tuple[dict[str, np.memmap], dict] | None:
        """The cached splits (memory-mapped, read-only) and meta, or None when absent or incomplete."""
        try:
            meta = json.loads(self.meta_path.read_text())
            if meta.get("version") != CACHE_VERSION or meta.get("key") != self.key:
                return None
            dtype = np.dtype(meta["dtype"])
            arrays = {}
            for split in SPLITS:
                path, n = self.split_path(split), int(meta["tokens"][split])
                if n <= 0 or path.stat().st_size != n * dtype.itemsize:
                    return None
                arrays[split] = np.memmap(path, dtype=dtype, mode="r", shape=(n,))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return arrays, meta

    def build(self, dtype: np.dtype, fill: Callable[[dict[str, TokenWriter]], dict]) -> tuple[dict[str, np.memmap], dict]:
        """Run `fill(writers)` (it writes each split's tokens and returns extra meta), commit, reload."""
        atomic.refuse_links([self.dir])  # a planted link would send the cache's files elsewhere
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DataError(f"cannot create the token cache folder {self.dir} ({err}); set data.cache_dir") from err
        try:
            with contextlib.ExitStack() as stack:
                writers = {s: _SplitWriter(stack.enter_context(atomic.atomic_open(self.split_path(s))), dtype) for s in SPLITS}
                extra = fill(writers)
                for split, w in writers.items():
                    if w.count == 0:
                        raise DataError(f"the {split} split is empty ({extra.get('what', self.stem)}); add more text")
            meta = {
                "version": CACHE_VERSION,
                "key": self.key,
                "dtype": np.dtype(dtype).name,
                "tokens": {s: w.count for s, w in writers.items()},
                **extra,
            }
            atomic.write_json(self.meta_path, meta)
        except OSError as err:  # read-only folder, full disk: the temporaries are removed, no entry is left
            if isinstance(err, MltrainError):
                raise
            raise StorageError(
                f"cannot write the token cache in {self.dir} ({atomic.full_or_denied(err)}); free some space or "
                f"point data.cache_dir at a writable folder"
            ) from None
        loaded = self.load()
        if loaded is None:  # pragma: no cover - only on a concurrent delete
            raise DataError(f"the token cache entry {self.meta_path} vanished right after it was written")
        log.info("cached tokens in %s", self.meta_path.with_suffix(".*"))
        return loaded
