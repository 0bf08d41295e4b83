"""Token cache: a corpus is tokenized once, then memory-mapped by every later run.

Layout under `<data.cache_dir>/tokens/`, one entry per (source, content key, tokenizer):

    <source>-<tokenizer>-<key>.train.bin   raw token ids (dtype in the meta file), no header
    <source>-<tokenizer>-<key>.val.bin
    <source>-<tokenizer>-<key>.json        meta: key, dtype, token counts, description

The key is a hash of the content (plus anything else that changes the tokens, e.g. the validation
fraction), so edited data never hits a stale entry. Both .bin files are written atomically first and
the meta file last: an entry without its meta file, or whose sizes disagree with it, is rebuilt.

Each entry proves its bytes: the meta file holds the sha256 of every CHECK_CHUNK bytes of each .bin,
computed while it is written. At open, an entry up to FULL_CHECK_BYTES is checked whole (0.044 s for the
prose corpus's 32.6 MB train.bin, see docs/configuration.md); a larger one is checked on its first and last chunk and
SAMPLE_CHUNKS others drawn at random, so a damaged file (a crash can leave one zero-filled at its right
size) is found at once or within a few opens. An entry that fails is rebuilt, with one warning line,
never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from mltrain.core import atomic
from mltrain.core.errors import DataError, MltrainError, StorageError

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 2: checksums in the meta file, the corpus record
SPLITS = ("train", "val")
CHECK_CHUNK = 4 << 20  # bytes per checksum
FULL_CHECK_BYTES = 256 << 20  # entries up to this size are checked whole at every open
SAMPLE_CHUNKS = 6  # chunks of a larger entry checked at random at each open (besides its first and last)


class TokenWriter(Protocol):
    def write(self, tokens: np.ndarray) -> None: ...


class _SplitWriter:
    def __init__(self, f: Any, dtype: np.dtype):
        self.f, self.dtype, self.count = f, dtype, 0
        self.digests: list[str] = []
        self._hash, self._filled = hashlib.sha256(), 0

    def write(self, tokens: np.ndarray) -> None:
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        data = memoryview(tokens).cast("B")  # type: ignore[arg-type]  # numpy's stubs: ndarray lacks __buffer__ under 3.10 rules
        self.f.write(data)
        self.count += len(tokens)
        while len(data):
            take = min(len(data), CHECK_CHUNK - self._filled)
            self._hash.update(data[:take])
            self._filled, data = self._filled + take, data[take:]
            if self._filled == CHECK_CHUNK:
                self._close_chunk()

    def _close_chunk(self) -> None:
        self.digests.append(self._hash.hexdigest())
        self._hash, self._filled = hashlib.sha256(), 0

    def checksums(self) -> list[str]:
        if self._filled:
            self._close_chunk()
        return self.digests


def damaged_chunk(path: Path, digests: list[str], chunk: int, rng: random.Random | None = None) -> int | None:
    """The index of a chunk of `path` whose sha256 is not its digest (None when those checked agree): every
    chunk when the file is at most FULL_CHECK_BYTES, else the first, the last and SAMPLE_CHUNKS others."""
    n = len(digests)
    if n * chunk <= FULL_CHECK_BYTES or n <= SAMPLE_CHUNKS + 2:
        picked = list(range(n))
    else:
        picked = sorted({0, n - 1, *(rng or random.Random()).sample(range(1, n - 1), SAMPLE_CHUNKS)})
    with open(path, "rb") as f:
        for i in picked:
            f.seek(i * chunk)
            if hashlib.sha256(f.read(chunk)).hexdigest() != digests[i]:
                return i
    return None


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

    def load(self, verify: bool = True) -> tuple[dict[str, np.memmap], dict] | None:
        """The cached splits (memory-mapped, read-only) and meta, or None when absent, incomplete or
        damaged (its bytes fail their checksums: see the module docstring)."""
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
                if verify and self._damaged(path, meta["checksums"], split):
                    return None
                arrays[split] = np.memmap(path, dtype=dtype, mode="r", shape=(n,))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return arrays, meta

    def _damaged(self, path: Path, checksums: dict, split: str) -> bool:
        digests, chunk = list(checksums[split]), int(checksums["chunk_bytes"])
        if len(digests) != -(-path.stat().st_size // chunk):
            bad: int | None = 0
        else:
            bad = damaged_chunk(path, digests, chunk)
        if bad is None:
            return False
        log.warning("the token cache entry %s is damaged (%s, bytes %d to %d, fails its checksum): rebuilding it",
                    self.meta_path, path.name, bad * chunk, (bad + 1) * chunk)
        return True

    def check_writable(self) -> None:
        """DataError or StorageError, in one line, when the cache folder cannot be made or written: called
        before a corpus is read and tokenized, not only once its tokens are ready."""
        atomic.refuse_links([self.dir])  # a planted link would send the cache's files elsewhere
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DataError(f"cannot create the token cache folder {self.dir} ({err}); set data.cache_dir") from err
        try:
            with tempfile.TemporaryFile(dir=self.dir):
                pass
        except OSError as err:
            raise StorageError(f"cannot write the token cache in {self.dir} ({atomic.full_or_denied(err)}); free some "
                               f"space or point data.cache_dir at a writable folder") from None

    def build(self, dtype: np.dtype, fill: Callable[[Mapping[str, TokenWriter]], dict]) -> tuple[dict[str, np.memmap], dict]:
        """Run `fill(writers)` (it writes each split's tokens and returns extra meta), commit, reload."""
        self.check_writable()
        try:
            with contextlib.ExitStack() as stack:
                writers: dict[str, _SplitWriter] = {s: _SplitWriter(stack.enter_context(atomic.atomic_open(self.split_path(s))), dtype) for s in SPLITS}
                extra = fill(writers)
                for split, w in writers.items():
                    if w.count == 0:
                        raise DataError(f"the {split} split is empty ({extra.get('what', self.stem)}); add more text")
            meta = {
                "version": CACHE_VERSION,
                "key": self.key,
                "dtype": np.dtype(dtype).name,
                "tokens": {s: w.count for s, w in writers.items()},
                "checksums": {"chunk_bytes": CHECK_CHUNK, **{s: w.checksums() for s, w in writers.items()}},
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
        loaded = self.load(verify=False)  # just written and hashed
        if loaded is None:  # pragma: no cover - only on a concurrent delete
            raise DataError(f"the token cache entry {self.meta_path} vanished right after it was written")
        log.info("cached tokens in %s", self.meta_path.with_suffix(".*"))
        return loaded
