"""The packages corpus (`data=packages`): the English documentation inside the installed packages.

The packages `pip install -e ".[dev]"` brings (torch, numpy, scipy, ...; see PACKAGES) carry their
reference documentation as docstrings. Each of their modules is one document, `<package>/<path>`: its
module docstring, then its classes' and functions' docstrings in source order (parsed with `ast` as
embedded.py does for the standard library; nothing is ever imported), cleaned:

* code is dropped: fenced blocks (```), doctest paragraphs (half their lines `>>>` / `...`) and paragraphs
  less than 80% letters and spaces (code, tables, formulas);
* repeats are dropped: a paragraph of 64 characters or more is kept only where it first occurs (by
  document name), so docstrings copied across modules are read once.

The embedded corpus's documents (pydoc topics, standard-library docstrings) are added unchanged. A
package that is not installed is left out. The text therefore depends on the installed versions: its
identity is a content hash (sha256 of every document's name and text), which the loader writes into the
data description that runs record. Skipped folders: tests, benchmarks, vendored code, caches.

Extraction parses every module (~70 s of CPU time for ~10,000 modules), so the text is cached once per
set of source files, keyed by their paths, sizes and modification times (see `fingerprint`).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from mltrain import atomic
from mltrain.data import embedded

log = logging.getLogger(__name__)

# Bump when the extraction or the cleaning below changes, so text and token caches of the old text go.
EXTRACTOR_VERSION = 1

# (import name, licence) of each package read, in this order; all are on the package registries under
# these licences (each package's own code; torch's metadata lists its bundled third-party parts too).
PACKAGES: tuple[tuple[str, str], ...] = (
    ("torch", "BSD-3-Clause"),
    ("numpy", "BSD-3-Clause"),
    ("scipy", "BSD-3-Clause"),
    ("sympy", "BSD-3-Clause"),
    ("mpmath", "BSD-3-Clause"),
    ("networkx", "BSD-3-Clause"),
    ("pandas", "BSD-3-Clause"),
    ("matplotlib", "Matplotlib licence (PSF-based)"),
    ("datasets", "Apache-2.0"),
    ("huggingface_hub", "Apache-2.0"),
    ("transformers", "Apache-2.0"),
    ("wandb", "MIT"),
    ("pyarrow", "Apache-2.0"),
    ("fsspec", "BSD-3-Clause"),
    ("fontTools", "MIT"),
    ("PIL", "MIT-CMU (Pillow)"),
    ("pydantic", "MIT"),
    ("jinja2", "BSD-3-Clause"),
    ("joblib", "BSD-3-Clause"),
    ("click", "BSD-3-Clause"),
    ("pyparsing", "MIT"),
    ("rich", "MIT"),
    ("pygments", "BSD-2-Clause"),
)

SKIP_DIRS = frozenset(
    {"tests", "test", "testing", "benchmarks", "_vendor", "vendor", "vendored", "extern", "__pycache__"}
)
MIN_DEDUP_CHARS = 64  # shorter paragraphs (section headers, "Returns", ...) may repeat
MIN_PROSE_SHARE = 0.8  # a paragraph with fewer letters and spaces than this share is code or a table
_FENCE = re.compile(r"```.*?(```|\Z)", re.S)
_CODE_LINE = re.compile(r"\s*(>>>|\.\.\.( |$))")


def _install_path() -> list[str]:
    """sys.path without the working directory (`''` or the folder `python -m` / `python -c` put first): a
    folder of the user's named like a source (`datasets/`) is not the installed package."""
    here = Path.cwd().resolve()
    out = []
    for entry in sys.path:
        try:
            if entry and Path(entry).resolve() != here:
                out.append(entry)
        except OSError:
            continue
    return out


def package_dirs(packages: Sequence[str] | None = None) -> list[tuple[str, Path]]:
    """(name, folder) of each installed package of PACKAGES (or of `packages`), found on sys.path (less the
    working directory) without importing it; packages that are not installed are left out."""
    found, path = [], _install_path()
    for name in packages if packages is not None else [p for p, _ in PACKAGES]:
        spec = importlib.machinery.PathFinder.find_spec(name, path)  # a top-level name: runs no package code
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:
            found.append((name, Path(locations[0])))
    return found


def module_files(roots: Iterable[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """(document name `<package>/<relative path>`, path) of every module below `roots`, sorted by name."""
    found = []
    for name, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            for fn in filenames:
                if fn.endswith(".py") and (Path(dirpath) / fn).is_file():  # a dangling link is no module
                    path = Path(dirpath) / fn
                    found.append((f"{name}/{path.relative_to(root).as_posix()}", path))
    return sorted(found)


def fingerprint(files: Sequence[tuple[str, Path]]) -> str:
    """Identity of the sources without reading them: each file's name, size and modification time, the
    Python version and the embedded corpus's own fingerprint (what the text cache is keyed by)."""
    h = hashlib.sha256(f"packages v{EXTRACTOR_VERSION} python {sys.version}\n{embedded.fingerprint()}\n".encode())
    for name, path in files:
        st = path.stat()
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _is_prose(paragraph: str) -> bool:
    lines = [ln for ln in paragraph.splitlines() if ln.strip()]
    if not lines or sum(bool(_CODE_LINE.match(ln)) for ln in lines) * 2 >= len(lines):
        return False
    text = "".join(lines)
    return sum(c.isalpha() or c == " " for c in text) >= MIN_PROSE_SHARE * len(text)


def clean(text: str, seen: set[bytes]) -> str:
    """`text` without code and without paragraphs already in `seen` (which it extends): see the module
    docstring."""
    kept = []
    for paragraph in re.split(r"\n\s*\n", _FENCE.sub("", text)):
        paragraph = paragraph.strip("\n")
        if not paragraph.strip() or not _is_prose(paragraph):
            continue
        if len(paragraph) >= MIN_DEDUP_CHARS:
            digest = hashlib.sha1(" ".join(paragraph.split()).encode()).digest()
            if digest in seen:
                continue
            seen.add(digest)
        kept.append(paragraph)
    return "\n\n".join(kept)


def package_documents(files: Sequence[tuple[str, Path]]) -> list[tuple[str, str]]:
    """The cleaned (name, text) documents of the modules `files` (sorted by name), empty ones left out."""
    seen: set[bytes] = set()
    docs = []
    for name, path in files:
        try:
            source = path.read_bytes()
        except OSError:  # a broken link inside a package: not a document
            continue
        text = clean(embedded.docstrings(source), seen)
        if text:
            docs.append((name, text))
    return docs


def content_hash(docs: Sequence[tuple[str, str]]) -> str:
    """sha256 of every document's name and text, in order: the corpus's identity."""
    h = hashlib.sha256()
    for name, text in docs:
        h.update(f"{name}\0{len(text)}\0{text}\0".encode())
    return h.hexdigest()


def documents(cache_dir: str | os.PathLike, files: Sequence[tuple[str, Path]], key: str) -> list[tuple[str, str]]:
    """The corpus: the documents of the modules `files` and the embedded corpus's, sorted by name; from the
    text cache `<cache_dir>/text/packages-<key>.json` when it holds them, else extracted and written there
    (atomically) for the next time."""
    path = Path(cache_dir).expanduser() / "text" / f"packages-{key[:24]}.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            return [(name, text) for name, text in saved["documents"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    docs = sorted(package_documents(files) + list(embedded.documents()))
    try:
        atomic.refuse_links([path.parent])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(path, {"key": key, "documents": docs})
    except OSError as err:  # an unwritable cache costs the next run the extraction, nothing else
        log.warning("could not cache the packages corpus's text in %s (%s)", path, err)
    return docs
