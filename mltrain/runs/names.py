"""What a run is called: its configuration label (the W&B group), its readable name, and short unique
names for run directories and W&B fields (file names and W&B fields have length limits). Torch-free."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Optional

from mltrain.runs.keys import BOOKKEEPING_KEYS, SEED_KEY, matches, override_key, override_value, seed_of, unread_keys

MAX_DIRNAME = 200

# Short words for the keys a sweep or a comparison most often varies; any other key is shown as written.
SHORT = {
    "optim.lr": "lr",
    "multilevel.coarse_optim.lr": "coarse lr",
    "schedule.warmup_steps": "warm-up",
    "optim.weight_decay": "weight decay",
    "optim.momentum": "momentum",
    "train.budget": "steps ×",
    "multilevel.delta": "δ",
    "seed": "seed",
}
SEP = " · "


def show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def key_text(key: str, value: Any) -> str:
    """One key's value in a readable name: `coarse lr 0.1`, or `key=value` for a key without a word."""
    short = SHORT.get(key)
    return f"{short} {show(value)}" if short else f"{key}={show(value)}"


def shorten(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and a hash of the whole: still unique."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{text[: limit - 11]}~{digest}"


def one_component(name: str) -> str:
    """`name` as one path component: '%' and every '/' (and NUL) percent-encoded, so a value such as
    `data.path=x/../../out` or an absolute path never becomes folders, let alone ones outside the sweep."""
    return name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")


def short_dirname(name: str) -> str:
    """A sweep job's directory name: its overrides as Hydra joins them, one path component (a '/' in a
    value is written %2F: the job's folder is always directly inside hydra.sweep.dir), shortened past
    MAX_DIRNAME characters (file systems refuse names over 255 bytes). Used by conf/config.yaml."""
    return shorten(one_component(name), MAX_DIRNAME) or "default"


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


def swept_keys(sweep_overrides: Iterable[str]) -> list[str]:
    """The keys a Hydra multirun varies, from the sweep's own command-line overrides (value lists,
    range(), choice(), glob(): whatever Hydra's override parser calls a sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([str(o) for o in sweep_overrides])
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def sweep_run_name(overrides: Iterable[str], swept: Iterable[str], run_kind: str, seed: int | str | None) -> str:
    """A sweep job's readable name: its run kind and the values of the keys its sweep varies, e.g.
    `multilevel · coarse lr 0.1 · seed 1` (the settings every job shares are left to the W&B config)."""
    swept = set(swept) - {SEED_KEY}
    shown = [key_text(override_key(o), override_value(o)) for o in overrides
             if override_value(o) is not None and override_key(o) in swept]
    return SEP.join([run_kind, *sorted(shown), *([key_text(SEED_KEY, seed)] if seed is not None else [])])
