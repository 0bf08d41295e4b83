"""Short, unique names for run directories and W&B fields (file names and W&B fields have length limits)."""

from __future__ import annotations

import hashlib

MAX_DIRNAME = 200


def shorten(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and a hash of the whole: still unique."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{text[: limit - 11]}~{digest}"


def short_dirname(name: str) -> str:
    """A sweep job's directory name: its overrides as Hydra joins them, shortened past MAX_DIRNAME
    characters (file systems refuse names over 255 bytes). Used by conf/config.yaml."""
    return shorten(name, MAX_DIRNAME) or "default"
