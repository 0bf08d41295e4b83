"""What a run is called: its configuration label (the W&B group), its readable name, and short unique
names for run directories and W&B fields (file names and W&B fields have length limits). Torch-free."""

from __future__ import annotations

import hashlib
from typing import Iterable, Optional

from mltrain.runs.keys import BOOKKEEPING_KEYS, SEED_KEY, matches, override_key, seed_of, unread_keys

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


def _label_parts(overrides: Iterable[str], run_kind: Optional[str]) -> list[str]:
    drop = (SEED_KEY, *BOOKKEEPING_KEYS, *unread_keys(run_kind))
    kept = {str(o).strip() for o in overrides if str(o).strip()}
    kept = {o for o in kept if not matches(override_key(o), drop)}
    return sorted(kept, key=lambda o: (override_key(o), o))


def run_label(overrides: Iterable[str], run_kind: Optional[str]) -> str:
    """Configuration label shared by all seeds of one configuration (the W&B group).

    The overrides minus `seed=...` and the keys that do not change what a run computes
    (runs/keys.py: BOOKKEEPING_KEYS), minus the sections of the methods `run_kind` does not read
    (`multilevel.*`/`coarsening*` for a single-level run, say: runs/keys.py METHOD_KEYS);
    sorted by key, joined with ","; "default" when nothing is left.
    """
    parts = _label_parts(overrides, run_kind)
    return ",".join(parts) if parts else "default"


def run_name(overrides: list[str], run_kind: str, seed: int | str | None = None) -> str:
    """Readable run name, e.g. `multilevel|coarsening=evenodd,multilevel.delta=0.5|seed=1`.

    `seed` defaults to the `seed=` override (omitted when there is none). The label part is cut to
    ~80 characters (with a short hash, so distinct labels keep distinct names).
    """
    label = shorten(run_label(overrides, run_kind), 80)
    seed = seed_of(overrides) if seed is None else seed
    return f"{run_kind}|{label}" + (f"|seed={seed}" if seed is not None else "")
