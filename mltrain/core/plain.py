"""`plain()`: a typed config (its dataclass sections, Choice enums, lists) as the plain tree that YAML,
JSON, W&B and a checkpoint hold: sections as dicts, an enum as its name. The same tree
`OmegaConf.to_container(composed, resolve=True, enum_to_str=True)` gives for the composed config, so
the config digest, the checkpoint's identity and the W&B config are one thing whichever form a run
started from. Imports nothing of mltrain: every layer that writes a config out uses it.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def plain(value: Any) -> Any:
    """`value` (a typed config or one of its sections) as OmegaConf's plain container: every dataclass
    a dict in field order, every Enum its name."""
    return OmegaConf.to_container(OmegaConf.structured(value), enum_to_str=True)
