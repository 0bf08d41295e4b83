"""The prose corpus (`data=prose`): English prose shipped inside the package, the same bytes everywhere.

Two public-domain sources, normalised once by scripts/build_prose_corpus.py (which records the package
name, version and sha256 each was taken from) and shipped as xz-compressed JSON-lines parts under
mltrain/data/corpora/, one `{"name", "text"}` object per document:

* `sotu/<year>-<president>-<n>`: the U.S. Presidential Annual Messages and State of the Union
  Addresses, 1790-2026 (249 documents);
* `web/<book>`: the World English Bible with Deuterocanon, one document per book (83 documents).

Nothing here depends on what else is installed: the text is read with the standard library (lzma,
json) from the package's own files. `prose.json` (the manifest) holds each part's sha256, compressed and
decompressed, and the corpus's: the sha256 of the parts' decompressed bytes in file-name order, i.e.

    xz -dc mltrain/data/corpora/prose-*.jsonl.xz | sha256sum

A part whose bytes disagree with the manifest is refused with one line (a damaged installation), never
read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from pathlib import Path

from mltrain.core.errors import DataError

CORPORA = Path(__file__).resolve().parent / "corpora"
MANIFEST = CORPORA / "prose.json"


@functools.lru_cache(maxsize=1)
def manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"data=prose: cannot read the corpus manifest {MANIFEST} ({err}); reinstall mltrain") from None


def record() -> dict:
    """The corpus's identity (data/corpus.py): name, sha256, documents, bytes."""
    m = manifest()
    return {"name": "prose", "sha256": m["sha256"], "documents": m["documents"], "bytes": m["bytes"]}


def _part_bytes(part: dict) -> bytes:
    path = CORPORA / part["file"]
    try:
        packed = path.read_bytes()
    except OSError as err:
        raise DataError(f"data=prose: cannot read {path} ({err.strerror or err}); reinstall mltrain") from None
    if hashlib.sha256(packed).hexdigest() != part["xz_sha256"]:
        raise DataError(f"data=prose: {path} is damaged (its sha256 is not the manifest's {part['xz_sha256'][:16]}…); "
                        f"reinstall mltrain")
    return lzma.decompress(packed)


def fingerprint() -> str:
    """What the token cache is keyed by: the manifest's corpus sha256 (the parts are checked against it
    when they are read)."""
    return manifest()["sha256"]


@functools.lru_cache(maxsize=1)
def documents() -> tuple[tuple[str, str], ...]:
    """All (name, text) documents, sorted by name; DataError when a part is damaged."""
    whole = hashlib.sha256()
    docs: list[tuple[str, str]] = []
    for part in manifest()["parts"]:
        raw = _part_bytes(part)
        whole.update(raw)
        for line in raw.decode("utf-8").splitlines():
            doc = json.loads(line)
            docs.append((doc["name"], doc["text"]))
    if whole.hexdigest() != manifest()["sha256"]:
        raise DataError(f"data=prose: the corpus's text does not have the manifest's sha256 {manifest()['sha256'][:16]}…; "
                        f"reinstall mltrain")
    return tuple(sorted(docs))
