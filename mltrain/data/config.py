"""The `data` node of the run config: where tokens come from and how they are split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mltrain.core.choice import Choice


class Source(Choice):
    embedded = "embedded"  # the Python documentation shipped with Python: no download
    prose = "prose"  # English prose shipped with mltrain (State of the Union addresses, a modern Bible), ~17 MB
    text = "text"  # local text files (data.path)
    shards = "shards"  # a folder of llm.c-format token shards (data.dir)


@dataclass
class DataConfig:
    source: Source = Source.embedded
    tokenizer: str = "bytes"  # bytes | gpt2 | any tiktoken encoding name (an open set: checked when loaded)
    path: Optional[str] = None  # data=text: a file, a directory or a glob
    dir: Optional[str] = None  # data=shards: folder of llm.c-format .bin shards
    # data=text: train on files that are not UTF-8 text (more than 1% undecodable or control bytes)
    # anyway, their undecodable bytes read as U+FFFD. By default such a file is refused.
    allow_binary: bool = False
    val_fraction: float = 0.05  # held-out share (by document; a single text file: its last fraction)
    cache_dir: str = "${oc.env:MLTRAIN_CACHE,${oc.env:HOME,.}/.cache/mltrain}"
    # data=fineweb_edu: when no shards exist, prepare them (downloads!) instead of stopping with the command.
    prepare_if_missing: bool = False
