"""Data that proves itself: a token-cache entry whose bytes fail their checksums (a crash can leave a .bin
zero-filled at its right size) is rebuilt, never used; the split by document keeps the held-out share near
the one asked when one document is much larger than the rest; every source records its corpus."""

import hashlib
import json
import logging
import random

import numpy as np
import pytest

from mltrain.data import cache, load_tokens
from mltrain.data.loader import validation_documents


def _docs(folder, n=12):
    folder.mkdir()
    for i in range(n):
        (folder / f"doc{i:02d}.txt").write_text(f"Document {i} says something of its own. " * (20 + i))
    return folder


def _entry(cache_dir, split="train"):
    meta_path = next((cache_dir / "tokens").glob("text-*.json"))
    return meta_path, meta_path.with_name(meta_path.stem + f".{split}.bin")


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_zero_filled_cache_file_is_rebuilt_not_used(tmp_path, caplog, split):
    cfg = {"source": "text", "path": str(_docs(tmp_path / "docs")), "cache_dir": str(tmp_path / "cache")}
    good = load_tokens(cfg)
    want = (np.array(good.train[0]), np.array(good.val[0]))
    meta_path, bin_path = _entry(tmp_path / "cache", split)
    size = bin_path.stat().st_size
    bin_path.write_bytes(b"\0" * size)  # what a crash can leave: the right size, no content
    with caplog.at_level(logging.WARNING):
        again = load_tokens(cfg)
    assert np.array_equal(again.train[0], want[0]) and np.array_equal(again.val[0], want[1])
    assert bin_path.read_bytes() != b"\0" * size  # rebuilt in place
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and bin_path.name in lines[0] and "rebuilding" in lines[0]
    assert again.corpus == good.corpus and good.corpus["name"] == "text" and good.corpus["documents"] == 12


def test_meta_holds_chunk_checksums_of_the_written_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CHECK_CHUNK", 64)  # many chunks, a partial last one
    cfg = {"source": "text", "path": str(_docs(tmp_path / "docs")), "cache_dir": str(tmp_path / "cache")}
    load_tokens(cfg)
    meta_path, bin_path = _entry(tmp_path / "cache")
    sums = json.loads(meta_path.read_text())["checksums"]
    data = bin_path.read_bytes()
    assert sums["chunk_bytes"] == 64
    assert sums["train"] == [hashlib.sha256(data[i : i + 64]).hexdigest() for i in range(0, len(data), 64)]


def test_a_large_entry_is_checked_on_its_ends_and_a_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "FULL_CHECK_BYTES", 0)  # every entry counts as large
    chunk, n = 16, 40
    data = bytes(random.Random(0).randrange(256) for _ in range(chunk * n))
    path = tmp_path / "x.bin"
    path.write_bytes(data)
    digests = [hashlib.sha256(data[i : i + chunk]).hexdigest() for i in range(0, len(data), chunk)]
    assert cache.damaged_chunk(path, digests, chunk) is None
    for bad in (0, n - 1):  # the first and last chunk are always checked
        broken = bytearray(data)
        broken[bad * chunk] ^= 1
        path.write_bytes(bytes(broken))
        assert cache.damaged_chunk(path, digests, chunk) == bad
    path.write_bytes(b"\0" * len(data))  # zero-filled: any chunk checked fails
    assert cache.damaged_chunk(path, digests, chunk, random.Random(1)) == 0
    broken = bytearray(data)
    broken[20 * chunk] ^= 1  # a middle chunk: found by the samples of some opens, not all
    path.write_bytes(bytes(broken))
    found = [cache.damaged_chunk(path, digests, chunk, random.Random(seed)) for seed in range(40)]
    assert set(found) == {None, 20}


def _min_hash_name(candidates):
    return min(candidates, key=lambda n: hashlib.sha1(n.encode()).hexdigest())


@pytest.mark.parametrize("big_share", [0.5, 0.8, 0.95])
def test_one_huge_document_does_not_take_the_held_out_side(big_share):
    names = [f"small/{i:03d}" for i in range(200)]
    huge = _min_hash_name([f"huge/{i}" for i in range(2000)])
    assert _min_hash_name([huge, *names]) == huge  # first in the split's hash order: the old rule held it out
    small = 1000
    sizes = [small] * 200 + [int(200 * small * big_share / (1 - big_share))]
    flags = validation_documents([*names, huge], sizes, 0.05)
    share = sum(s for s, v in zip(sizes, flags) if v) / sum(sizes)
    assert not flags[-1]  # the huge document stays in training
    assert 0.04 <= share <= 0.075


def test_all_documents_too_large_still_holds_out_the_smallest():
    # hash order: c, a, b; the last one (b) always stays in training
    flags = validation_documents(["c", "a", "b"], [1000, 10, 5], 0.001)
    assert flags == [False, True, False]
