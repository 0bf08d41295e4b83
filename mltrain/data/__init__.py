"""mltrain's data layer: tokenizers, token sources, the token cache and the batch sampler.

    splits = load_tokens(cfg.data)                      # TokenSplits: train/val token arrays
    sampler = BatchSampler(splits.train, batch_size, block_size, seed, rank, world_size)
    x, y = sampler.next_batch()                         # int64 (B/W, T) CPU tensors

`mltrain-prepare` (mltrain.data.prepare) turns FineWeb-Edu (or local files) into token shards for
`data=fineweb_edu` / `data=shards`. Importing this package does not import torch or datasets; the
sampler (torch) is loaded on first use of `BatchSampler`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mltrain.core.errors import DataError
from mltrain.data.loader import TokenSplits, load_tokens
from mltrain.data.tokenizers import Tokenizer, get_tokenizer

if TYPE_CHECKING:
    from mltrain.data.sampler import BatchSampler

__all__ = ["BatchSampler", "DataError", "TokenSplits", "Tokenizer", "get_tokenizer", "load_tokens"]


def __getattr__(name: str) -> Any:
    if name == "BatchSampler":
        from mltrain.data.sampler import BatchSampler

        return BatchSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
