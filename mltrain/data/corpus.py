"""A corpus's identity, as every run records it (summary.json's `corpus`): which text it trained on.

    {"name": "prose", "sha256": "6107ef98...", "documents": 332, "bytes": 17184800}

`sha256` is the full hash of the text, so two runs (or a study resumed on another machine) that record
the same one trained and were evaluated on the same bytes. For `prose` it is the sha256 of the shipped
parts' decompressed bytes (data/prose.py); for the sources built from documents (`embedded`,
`text`) it is `Hasher`'s: every document's name, length and text, in corpus order; for `shards`, whose
files may hold billions of tokens, it hashes each shard's name, token count and first and last tokens
only, and says so in `sha256_of`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


class Hasher:
    """Counts and hashes documents as they are added (the same order gives the same hash)."""

    def __init__(self) -> None:
        self.h, self.documents, self.bytes = hashlib.sha256(), 0, 0

    def add(self, name: str, text: str) -> None:
        data = text.encode("utf-8")
        self.h.update(f"{name}\0{len(data)}\0".encode("utf-8"))
        self.h.update(data)
        self.documents += 1
        self.bytes += len(data)

    def record(self, name: str) -> dict:
        return {"name": name, "sha256": self.h.hexdigest(), "documents": self.documents, "bytes": self.bytes}


def record_of(name: str, docs) -> dict:
    """The record of `docs`, (name, text) pairs in corpus order."""
    hasher = Hasher()
    for doc_name, text in docs:
        hasher.add(doc_name, text)
    return hasher.record(name)


SHARD_SAMPLE = 1 << 15  # tokens hashed at each end of a shard


def shards_record(arrays) -> dict:
    """A cheap identity of token shards (memory-mapped arrays, train then val): each one's file name, token
    count and first and last SHARD_SAMPLE tokens; `sha256_of` says so."""
    h, n_bytes = hashlib.sha256(), 0
    for a in arrays:
        name = Path(str(getattr(a, "filename", "") or "")).name
        h.update(f"{name}\0{len(a)}\0".encode("utf-8"))
        h.update(np.ascontiguousarray(a[:SHARD_SAMPLE]).tobytes())
        h.update(np.ascontiguousarray(a[-SHARD_SAMPLE:]).tobytes())
        n_bytes += int(a.nbytes)
    return {"name": "shards", "sha256": h.hexdigest(), "documents": len(arrays), "bytes": n_bytes,
            "sha256_of": f"each shard's file name, token count and first and last {SHARD_SAMPLE:,} tokens"}
