"""Readable names: a configuration is named by its run kind and the keys whose values differ between the
configurations of one report (`multilevel · coarse lr 0.1`); the settings they all share are printed
once, apart. Two different configurations never get one name: any two labels differ in a key that is
shown."""

from __future__ import annotations

from typing import Any, Sequence

from mltrain.runs.names import SEP, key_text


def readable(items: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], dict[str, Any]]:
    """(a name per (run kind, {key: value}) item, the settings every item shares)."""
    keys: list[str] = []
    for _, parts in items:
        keys += [k for k in parts if k not in keys]
    common = {}
    for k in keys:
        values = {repr(parts.get(k, _ABSENT)) for _, parts in items}
        if len(values) == 1 and len(items) > 1:
            common[k] = items[0][1][k]
    names = []
    for kind, parts in items:
        shown = [key_text(k, parts[k]) for k in keys if k in parts and k not in common]
        names.append(SEP.join([kind, *shown]))
    return names, common


_ABSENT = object()
