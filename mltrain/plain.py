"""`plain()`: a typed config (its dataclass sections, Choice enums, lists) as the plain tree that YAML,
JSON, W&B and a checkpoint hold: sections as dicts, an enum as its name. The same tree
`OmegaConf.to_container(composed, resolve=True, enum_to_str=True)` gives for the composed config, so
the config digest, the checkpoint's identity and the W&B config are one thing whichever form a run
started from. Imports nothing of mltrain: every layer that writes a config out uses it.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any


def plain(value: Any) -> Any:
    """`value` with every dataclass made a dict (in field order), every Enum its name, lists and
    dicts walked; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
