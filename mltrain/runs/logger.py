"""The `logger` section of the run config: where a run's rows go besides metrics.jsonl (W&B, its
project, mode, names and tags). mltrain/runs/tracking.py's Tracker and mltrain/runs/wandb_mirror.py
read it; mltrain/config.py composes it into the schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from mltrain.core.choice import Choice


class LoggerName(Choice):
    jsonl = "jsonl"
    wandb = "wandb"


class LoggerMode(Choice):
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class LoggerConfig:
    name: LoggerName = LoggerName.jsonl  # metrics.jsonl is always written; wandb mirrors it
    project: str = "mltrain"
    entity: Optional[str] = None
    mode: LoggerMode = LoggerMode.online  # online falls back to offline, see logger/wandb.yaml
    group: Optional[str] = None  # null: derived from the overrides minus the seed
    run_name: Optional[str] = None  # null: derived from the overrides
    job_type: Optional[str] = None  # null: the run kind (single, multilevel, ...); mltrain-study: its stage
    tags: List[str] = field(default_factory=list)
