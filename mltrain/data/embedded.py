"""The embedded corpus: English text that ships with Python itself, so training needs no download.

Two kinds of documents, each with a stable name, returned sorted by name:

* `pydoc/<topic>`: every entry of `pydoc_data.topics.topics` (the language reference text that
  `help()` shows), one document per topic;
* `stdlib/<path>`: for each pure-Python module of the standard library, its module docstring followed
  by the docstrings of its classes and functions (in source order), one document per module.

Modules are read as source and parsed with `ast`; none is ever imported (`antigravity` opens a web
browser, `this` prints a poem). Skipped: tests, IDLE, lib2to3, turtledemo, tkinter, distutils,
ensurepip, venv, site-packages, the codec tables under encodings/, and private modules (`_pydecimal`,
`_pyio`, ... duplicate public ones). About 1.7 MB of text on CPython 3.11.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
import sysconfig
from pathlib import Path

# Bump when the extraction below changes, so token caches built from the old text are not reused.
EXTRACTOR_VERSION = 1

SKIP_DIRS = frozenset(
    {
        "test", "tests", "idle_test", "idlelib", "lib2to3", "turtledemo", "tkinter", "distutils",
        "ensurepip", "venv", "site-packages", "dist-packages", "encodings", "pydoc_data",
        "__pycache__", "__phello__", "lib-dynload",
    }
)  # fmt: skip


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _topics_file() -> Path:
    import pydoc_data  # a data-only package: importing it has no side effects

    return Path(pydoc_data.__file__).parent / "topics.py"


def _module_files() -> list[tuple[str, Path]]:
    """(document name, path) of the stdlib modules used, sorted by name."""
    root = _stdlib_dir()
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(("config-", ".")))
        for fn in filenames:
            if not fn.endswith(".py") or (fn.startswith("_") and fn != "__init__.py"):
                continue
            path = Path(dirpath) / fn
            rel = path.relative_to(root).as_posix()
            found.append((f"stdlib/{rel}", path))
    return sorted(found)


def fingerprint() -> str:
    """Content hash of everything the corpus is made from (cheap: hashes ~20 MB of source, no parsing)."""
    h = hashlib.sha256(f"embedded v{EXTRACTOR_VERSION} python {sys.version}\n".encode())
    for name, path in [("pydoc/topics.py", _topics_file()), *_module_files()]:
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def docstrings(source: bytes) -> str:
    """Module docstring, then class and function docstrings in source order, blank-line separated."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a file for another Python version; not ours to judge
        return ""
    except (RecursionError, MemoryError):  # a generated module with a huge expression: no prose in it
        return ""
    docs = []
    module_doc = ast.get_docstring(tree)
    if module_doc:
        docs.append(module_doc)
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in sorted(defs, key=lambda n: (n.lineno, n.col_offset)):
        doc = ast.get_docstring(node)
        if doc:
            docs.append(doc)
    return "\n\n".join(docs)


@functools.lru_cache(maxsize=1)
def documents() -> tuple[tuple[str, str], ...]:
    """All (name, text) documents, sorted by name. Deterministic for a given Python installation."""
    from pydoc_data.topics import topics

    docs = [(f"pydoc/{key}", text.strip()) for key, text in topics.items()]
    for name, path in _module_files():
        docs.append((name, docstrings(path.read_bytes())))
    return tuple(sorted((name, text) for name, text in docs if text))
