"""Tokenizers: raw UTF-8 bytes, or any tiktoken encoding (gpt2, r50k_base, cl100k_base, ...).

Documents are always encoded *ordinarily*: a literal "<|endoftext|>" inside a document is plain text,
never the special token. The special end-of-text token (when the tokenizer has one) only ever appears
where this package puts it, as the separator between documents. The `bytes` tokenizer has no special
token; its documents are separated by a blank line ("\\n\\n") instead.

This module is deliberately light (numpy and tiktoken only): the parallel workers of `mltrain-prepare`
import it in fresh processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from mltrain.core.errors import DataError

BYTES = "bytes"
BYTES_SEPARATOR = b"\n\n"


@dataclass(frozen=True)
class Tokenizer:
    name: str
    n_vocab: int
    eot_token: int | None
    _encoding: Any = field(default=None, repr=False, compare=False)  # tiktoken.Encoding; None for bytes

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token text in it is encoded as ordinary text."""
        if self._encoding is None:
            return list(text.encode("utf-8"))
        return self._encoding.encode_ordinary(text)

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        if self._encoding is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self._encoding.decode(ids)

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (b"" for an id the tokenizer does not have), so text can be
        decoded as it is generated, a character split across tokens included."""
        if self._encoding is None:
            return bytes([token]) if 0 <= token < 256 else b""
        try:
            return self._encoding.decode_single_token_bytes(token)
        except KeyError:
            return b""

    @property
    def dtype(self) -> np.dtype:
        """Smallest unsigned dtype that holds every id: uint16 up to 65,536 ids, else uint32."""
        return np.dtype(np.uint16 if self.n_vocab <= 65536 else np.uint32)

    @property
    def separator(self) -> list[int]:
        """Tokens put between documents: [eot] when the tokenizer has one, else the bytes of "\\n\\n"."""
        return [self.eot_token] if self.eot_token is not None else list(BYTES_SEPARATOR)

    def encode_array(self, text: str) -> np.ndarray:
        """`encode(text)` as a 1-D array of `self.dtype`."""
        if self._encoding is None:
            return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(self.dtype)
        return np.array(self._encoding.encode_ordinary(text), dtype=self.dtype)

    def encode_documents(self, texts: Sequence[str], separator: str = "after") -> tuple[np.ndarray, np.ndarray]:
        """Encode documents into one array, the separator `before` or `after` each document.

        Returns (tokens, lengths): lengths[i] counts document i's tokens plus its separator, so
        `np.cumsum(lengths)` gives the document boundaries inside `tokens`.
        """
        if separator not in ("before", "after"):
            raise ValueError(f"separator must be 'before' or 'after', not {separator!r}")
        sep = np.array(self.separator, dtype=self.dtype)
        parts: list[np.ndarray] = []
        lengths = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            ids = self.encode_array(text)
            if separator == "before":
                parts += [sep, ids]
            else:
                parts += [ids, sep]
            lengths[i] = len(ids) + len(sep)
        tokens = np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)
        return tokens, lengths


def _offline_fix(name: str, key: str, bytes_alternative: bool) -> str:
    fix = (
        f"Fix: set TIKTOKEN_CACHE_DIR to a folder holding tiktoken's cached BPE files for '{name}' "
        f"(for gpt2: encoder.json and vocab.bpe, each named by the sha1 of its download URL)"
    )
    return f"{fix}, or use {key}=bytes (no download needed)." if bytes_alternative else f"{fix}."


@contextlib.contextmanager
def _cache_checked(name: str) -> Iterator[None]:
    """While tiktoken loads `name`: a cached BPE file that fails its checksum raises DataError naming it.
    tiktoken itself would delete such a file and download it again, which offline reads as a failed
    download (and loses the file a user put there)."""
    import tiktoken.load as tl

    real = tl.read_file_cached

    def checked(blobpath: str, expected_hash: str | None = None) -> bytes:
        folder = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
        folder = os.path.join(tempfile.gettempdir(), "data-gym-cache") if folder is None else folder
        path = os.path.join(folder, hashlib.sha1(blobpath.encode()).hexdigest())
        if folder and expected_hash and os.path.isfile(path):
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != expected_hash:
                    raise DataError(
                        f"the cached BPE file {path} (tiktoken's copy of {blobpath}) for encoding '{name}' is "
                        f"damaged: its SHA-256 is not the expected one. Replace it with a good copy, or delete "
                        f"it so that tiktoken fetches it again (nothing was changed)")
        return real(blobpath, expected_hash)

    tl.read_file_cached = checked
    try:
        yield
    finally:
        tl.read_file_cached = real


def get_tokenizer(name: str, key: str = "data.tokenizer", bytes_alternative: bool = True) -> Tokenizer:
    """`bytes` or a tiktoken encoding name. `key` is the config key named in error messages;
    `bytes_alternative=False` when switching to bytes is no fix (a trained model's own tokenizer)."""
    if name == BYTES:
        return Tokenizer(name=BYTES, n_vocab=256, eot_token=None)
    import tiktoken

    known = tiktoken.list_encoding_names()
    if name not in known:
        raise DataError(
            f"{key}={name!r} is not a known tokenizer; use 'bytes' or a tiktoken encoding: {', '.join(known)}"
        )
    try:
        with _cache_checked(name):
            enc = tiktoken.get_encoding(name)
    except (OSError, ImportError) as err:  # requests' ConnectionError/Timeout are OSErrors
        raise DataError(
            f"tiktoken could not download the BPE files for encoding '{name}' (offline?): "
            f"{type(err).__name__}: {str(err)[:200]}. {_offline_fix(name, key, bytes_alternative)}"
        ) from err
    except ValueError as err:  # tiktoken: hash mismatch of a downloaded or cached file
        raise DataError(
            f"tiktoken rejected the BPE files for encoding '{name}': {str(err)[:300]}. "
            f"Check the files in TIKTOKEN_CACHE_DIR. {_offline_fix(name, key, bytes_alternative)}"
        ) from err
    return Tokenizer(name=name, n_vocab=enc.n_vocab, eot_token=enc.eot_token, _encoding=enc)


# ---------------------------------------------------------------------------------------------
# Worker-process side of parallel tokenization (mltrain-prepare). Picklable top-level functions.

_worker_tokenizer: Tokenizer | None = None


def init_worker(name: str) -> None:
    global _worker_tokenizer
    # Ctrl-C reaches the whole process group: the main process handles it (and ends the pool);
    # workers ignoring it keeps their tracebacks off the console.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_tokenizer = get_tokenizer(name, key="prepare.tokenizer")


def encode_batch_before(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: `encode_documents(texts, "before")` with the worker's tokenizer."""
    assert _worker_tokenizer is not None, "init_worker was not called in this process"
    return _worker_tokenizer.encode_documents(texts, separator="before")
