"""The sampler's batches pinned, bit for bit, to what earlier versions drew, so a study begun with one
version resumes and compares with another (also when drawn ahead in blocks, stacked_range)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import batch_digest

from mltrain.data import BatchSampler, load_tokens


def _arrays() -> list[np.ndarray]:
    """Three shards of unequal length (one too short to sample, skipped), values that differ per shard."""
    rng = np.random.default_rng(2024)
    return [rng.integers(0, 50257, 5000).astype(np.uint16), rng.integers(0, 50257, 12).astype(np.uint16),
            rng.integers(0, 50257, 1800).astype(np.uint16), rng.integers(0, 50257, 777).astype(np.uint16)]


# (seed, batch index, rank, world size, batch size, block size) -> digest of (x, y) as the sampler of
# the version that began the long CPU studies drew them (a per-row loop over the windows).
PINNED = {
    (0, 0, 0, 1, 8, 32): "8b75e2075d0217d0",
    (0, 1, 0, 1, 8, 32): "f9e93cc0d2419202",
    (7, 123456, 0, 1, 16, 64): "e788ced3f7ab2feb",
    (7, 123456, 1, 2, 16, 64): "8a93ecff9d3b83cd",
    (3, 5, 2, 4, 12, 16): "5b53372fcb6e497e",
    (2**32 - 1, 2**40, 0, 1, 4, 8): "6b0842c599d948c8",
}
UINT32_PINNED = "176ed9e57a939687"
EMBEDDED_PINNED = {  # the CPU studies' corpus (data=embedded, byte tokens), at scale=cpu's shape
    (0, 0, 16, 64): "300aec189737eff5",
    (1, 599, 16, 64): "2a53b372eafb562e",
    (2_000_003, 17, 16, 64): "163e28abc69ed84f",
}


@pytest.mark.parametrize("key", list(PINNED))
def test_batches_are_the_ones_earlier_versions_drew(key):
    seed, index, rank, world, batch, block = key
    sampler = BatchSampler(_arrays(), batch, block, seed=seed, rank=rank, world_size=world)
    assert batch_digest(*sampler.batch(index)) == PINNED[key]


def test_batches_of_uint32_tokens_are_the_ones_earlier_versions_drew():
    arrays = [a.astype(np.uint32) * 3 for a in _arrays()]  # a vocabulary past 65,535 stores uint32 tokens
    assert batch_digest(*BatchSampler(arrays, 8, 32, seed=5).batch(9)) == UINT32_PINNED


def test_batches_of_the_embedded_corpus_are_the_ones_earlier_versions_drew():
    train = load_tokens({"source": "embedded", "tokenizer": "bytes"}).train
    for (seed, index, batch, block), digest in EMBEDDED_PINNED.items():
        assert batch_digest(*BatchSampler(train, batch, block, seed=seed).batch(index)) == digest, (seed, index)


def test_batches_drawn_ahead_in_a_block_are_each_the_samplers():
    for seed, index, rank, world, batch, block in PINNED:
        sampler = BatchSampler(_arrays(), batch, block, seed=seed, rank=rank, world_size=world)
        ahead = sampler.stacked_range(index, 5)
        for k in range(5):
            assert torch.equal(ahead[k], sampler.stacked(index + k))
