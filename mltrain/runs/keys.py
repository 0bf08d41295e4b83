"""Which config keys change what a run computes, and how an override string names its key.

`BOOKKEEPING_KEYS` is the one list of keys that never change what a run computes: where and how results
are logged or shown, how often checkpoints are taken, which device runs it, whether it is compiled or
its batches prefetched (the same computation, faster), the peak MFU is measured against, how often data
parallel ranks agree on a stop signal. Three rules read it, so they cannot disagree:

- the configuration label (runs/names.py): runs that differ only in these keys are one configuration
  (the seed is left out too: it names a replicate of a configuration, not another one);
- a sweep job's directory name (conf/config.yaml's `exclude_keys`, through the
  `mltrain_bookkeeping_keys` resolver): a sweep resumed with `train.compile=true` finds its jobs' dirs;
- the resume check (training/resume.py): a resumed run may set these differently.

A key matches itself and every key below it (`logger` matches `logger.mode`). Torch-free: the tools
that read run files use it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Iterator, Mapping, Optional

from mltrain.method.kinds import RunKind
from mltrain.method.registry import method_class

BOOKKEEPING_KEYS = (
    "hydra",
    "logger",
    "device",
    "train.compile",
    "train.progress",
    "train.resume",
    "train.allow_long",
    "train.checkpoint_interval",
    "train.keep_checkpoints",
    "train.peak_flops",
    "train.prefetch",
    "train.stop_check_interval",
    "train.eval_batch_size",
    "data.cache_dir",
    "data.prepare_if_missing",
    "plugins",  # which modules registered the methods: the config's own keys say what runs
)
SEED_KEY = "seed"  # changes the computation, but a seed is a replicate of a configuration, not another one
# The fraction of train.max_steps a run trains for: single-level runs at several budgets make the
# frontier mltrain-compare measures savings against (the axis mltrain-study sweeps for it).
BUDGET_KEY = "train.budget"


class _MethodSections(Mapping):
    """Run kind -> the config sections its depth method reads beyond the common ones (each registered
    method's `sections`, method/registry.py). A run's label leaves out the sections of the other methods:
    they cannot change what it computes (a study's common `multilevel.n_cycles=8` does not split its
    layer-dropping runs into another configuration)."""

    def __getitem__(self, kind: str) -> tuple[str, ...]:
        if kind not in RunKind:
            raise KeyError(kind)
        return method_class(kind).sections

    def __iter__(self) -> Iterator[RunKind]:
        return iter(RunKind)

    def __len__(self) -> int:
        return len(RunKind)


METHOD_KEYS: Mapping[str, tuple[str, ...]] = _MethodSections()


def unread_keys(run_kind: Optional[str]) -> tuple[str, ...]:
    """The method sections a run of `run_kind` does not read (none for a kind this version does not know)."""
    if run_kind not in METHOD_KEYS:
        return ()
    own = METHOD_KEYS[RunKind(run_kind)]
    return tuple(dict.fromkeys(k for keys in METHOD_KEYS.values() for k in keys if k not in own))


def split_override(override: str) -> tuple[str, Optional[str]]:
    """An override as written: the text before its first `=` and the text after it, None when it has no
    `=` (`~a.b`): `+a.b=1` -> (`+a.b`, `1`). The one place an override string is split; override_key
    and override_value read a key and a value from it."""
    key, sep, value = str(override).partition("=")
    return key, (value if sep else None)


def override_key(override: str) -> str:
    """The config key an override sets: `+a.b=1` -> `a.b`; `~a.b` -> `a.b`; `hydra/launcher=joblib` ->
    `hydra.launcher`; `group@package=value` -> `group`."""
    key = split_override(override)[0].strip().lstrip("+~")
    return key.split("@", 1)[0].replace("/", ".")


def label_overrides(label: str) -> list[str]:
    """A configuration label's overrides (runs/names.py joins them with ","): split on the commas that
    are not inside a value's [...] or {...}, so `stacking.grow_at=[0.125,0.3]` stays one override."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(label + ","):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth <= 0:
            parts.append(label[start:i])
            start = i + 1
    return [p for p in parts if p]


def override_value(override: str) -> Optional[str]:
    """The value an override sets (`seed=3` -> `3`), or None for a deletion without one (`~a.b`)."""
    value = split_override(override)[1]
    return value.strip() if value is not None else None


def matches(key: str, prefixes: Iterable[str]) -> bool:
    """Whether `key` is one of `prefixes` or below one of them."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def is_bookkeeping(key: str) -> bool:
    return matches(key, BOOKKEEPING_KEYS)


def config_digest(config: Mapping) -> str:
    """What a run computes, as 16 hex digits: the sha256 of its resolved config (a plain dict) with the
    bookkeeping keys and the seed left out, so two runs of one setting and seed share it wherever they
    ran (run.json records it; mltrain-compare counts runs that share it, their seed and data once)."""

    def kept(node: Any, prefix: str) -> Any:
        if isinstance(node, Mapping):
            return {str(k): kept(v, f"{prefix}{k}.") for k, v in sorted(node.items(), key=lambda kv: str(kv[0]))
                    if not is_bookkeeping(f"{prefix}{k}") and f"{prefix}{k}" != SEED_KEY}
        if isinstance(node, (list, tuple)):
            return [kept(v, prefix) for v in node]
        return node

    text = json.dumps(kept(config, ""), default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def seed_of(overrides: Iterable[str]) -> Optional[str]:
    """The `seed=` override's value, or None."""
    for o in overrides:
        if override_key(o) == SEED_KEY and override_value(o) is not None:
            return override_value(o)
    return None
