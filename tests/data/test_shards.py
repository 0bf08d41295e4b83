"""llm.c-format token shards: format, validation errors, folder rules, the missing-data message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from mltrain.config import DataConfig
from mltrain.data import BatchSampler, DataError, load_tokens
from mltrain.data import shards


def llmc_shard(path: Path, tokens: np.ndarray, magic: int = 20240520, version: int = 1, count: int | None = None):
    """Write a shard byte for byte as llm.c's write_datafile does, independently of mltrain."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def shard_cfg(folder: Path, tokenizer: str = "bytes", **kw) -> DataConfig:
    return DataConfig(source="shards", dir=str(folder), tokenizer=tokenizer, **kw)


def tokens(n: int, seed: int, high: int = 256) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, size=n).astype(np.uint16)


def test_round_trip_exact(tmp_path):
    t = tokens(5000, 0, high=65536)
    shards.write_shard(tmp_path / "x.bin", t)
    raw = (tmp_path / "x.bin").read_bytes()
    assert len(raw) == 1024 + 2 * 5000
    assert np.frombuffer(raw[:12], "<i4").tolist() == [20240520, 1, 5000]
    assert np.frombuffer(raw[12:1024], "<i4").tolist() == [0] * 253
    back = shards.read_shard(tmp_path / "x.bin")
    assert isinstance(back, np.memmap) and back.dtype == np.uint16 and np.array_equal(back, t)
    assert not list(tmp_path.glob(".*.tmp"))
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "x.bin").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600


def test_reads_independently_written_llmc_shards(tmp_path):
    val, train1, train2 = tokens(300, 1), tokens(700, 2), tokens(500, 3)
    llmc_shard(tmp_path / "fineweb_val_000000.bin", val)
    llmc_shard(tmp_path / "fineweb_train_000001.bin", train1)
    llmc_shard(tmp_path / "fineweb_train_000002.bin", train2)
    splits = load_tokens(shard_cfg(tmp_path))
    assert [len(a) for a in splits.val] == [300] and [len(a) for a in splits.train] == [700, 500]
    assert np.array_equal(splits.val[0], val)
    assert np.array_equal(splits.train[0], train1) and np.array_equal(splits.train[1], train2)
    assert all(isinstance(a, np.memmap) for a in splits.train + splits.val)
    assert "2 train + 1 val" in splits.description and "1,200 train / 300 val tokens" in splits.description
    x, y = BatchSampler(splits.train, 8, 64, seed=0).next_batch()
    assert x.shape == (8, 64)


def test_first_shard_is_val_without_val_name(tmp_path):
    for i, name in enumerate(["b.bin", "a.bin", "interval.bin"]):  # "interval" is not a validation shard
        llmc_shard(tmp_path / name, np.full(100 + i, i, dtype=np.uint16))
    splits = load_tokens(shard_cfg(tmp_path))
    assert [len(a) for a in splits.val] == [101]  # a.bin: first by name
    assert sorted(len(a) for a in splits.train) == [100, 102]


def test_val_named_shards_are_validation(tmp_path):
    for i, name in enumerate(["a_train.bin", "b_validation.bin", "c.bin", "d_val_1.bin"]):
        llmc_shard(tmp_path / name, np.full(100 + i, i, dtype=np.uint16))
    splits = load_tokens(shard_cfg(tmp_path))
    assert [len(a) for a in splits.val] == [101, 103] and [len(a) for a in splits.train] == [100, 102]


def test_only_val_shards_is_an_error(tmp_path):
    llmc_shard(tmp_path / "data_val_000000.bin", tokens(100, 0))
    with pytest.raises(DataError, match="training shard"):
        load_tokens(shard_cfg(tmp_path))


@pytest.mark.parametrize(
    "kind, match",
    [
        ("magic", "magic number 12345"),
        ("version", "version 7 is not supported"),
        ("truncated", "truncated"),
        ("short_header", "shorter than the 1024-byte"),
    ],
)
def test_bad_shards_name_the_file(tmp_path, kind, match):
    llmc_shard(tmp_path / "good_val.bin", tokens(100, 0))
    bad = tmp_path / "bad_train_000001.bin"
    if kind == "magic":
        llmc_shard(bad, tokens(100, 1), magic=12345)
    elif kind == "version":
        llmc_shard(bad, tokens(100, 1), version=7)
    elif kind == "truncated":
        llmc_shard(bad, tokens(100, 1), count=150)  # header promises more than the file holds
    else:
        bad.write_bytes(b"\x00" * 100)
    with pytest.raises(DataError, match=match) as e:
        load_tokens(shard_cfg(tmp_path))
    assert str(bad) in str(e.value)


def test_token_beyond_vocab_names_the_file_and_is_remembered(tmp_path):
    llmc_shard(tmp_path / "s_val.bin", tokens(100, 0))
    good = tmp_path / "s_train_1.bin"
    llmc_shard(good, tokens(1000, 1))
    load_tokens(shard_cfg(tmp_path))  # bytes: every id < 256
    sidecar = json.loads((tmp_path / shards.SIDECAR).read_text())["shards"]
    assert sidecar[good.name]["max_token"] == int(tokens(1000, 1).max())

    bad = tokens(1000, 1)
    bad[777] = 300
    llmc_shard(good, bad)  # rewritten: new mtime, so it is scanned again
    os.utime(good, ns=(os.stat(good).st_atime_ns, os.stat(good).st_mtime_ns + 10**9))
    with pytest.raises(DataError) as e:
        load_tokens(shard_cfg(tmp_path))
    msg = str(e.value)
    assert str(good) in msg and "300" in msg and "777" in msg and "data.tokenizer" in msg


def test_vocab_scan_is_skipped_for_known_shards(tmp_path):
    llmc_shard(tmp_path / "s_val.bin", tokens(100, 0))
    llmc_shard(tmp_path / "s_train_1.bin", tokens(1000, 1))
    load_tokens(shard_cfg(tmp_path))
    side = tmp_path / shards.SIDECAR
    data = json.loads(side.read_text())
    data["shards"]["s_train_1.bin"]["max_token"] = 9999  # pretend the remembered scan found 9999
    side.write_text(json.dumps(data))
    with pytest.raises(DataError, match="9999"):  # proves the remembered value is used, not a rescan
        load_tokens(shard_cfg(tmp_path))


def test_unwritable_sidecar_still_loads(tmp_path):
    llmc_shard(tmp_path / "s_val.bin", tokens(100, 0))
    llmc_shard(tmp_path / "s_train_1.bin", tokens(1000, 1))
    (tmp_path / shards.SIDECAR).mkdir()  # the sidecar cannot be written (as in a read-only folder)
    assert len(load_tokens(shard_cfg(tmp_path)).train[0]) == 1000
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("make", [False, True])
def test_missing_shards_message_gives_the_command(tmp_path, make):
    folder = tmp_path / "fineweb"
    if make:
        folder.mkdir()
        (folder / "readme.txt").write_text("no shards here")
    with pytest.raises(DataError) as e:
        load_tokens(shard_cfg(folder, tokenizer="bytes"))
    msg = str(e.value)
    assert f"mltrain-prepare prepare.out_dir={folder} prepare.tokenizer=bytes" in msg
    assert "prepare.max_tokens=" in msg and "data.prepare_if_missing=true" in msg and "10B" in msg
    assert ("does not exist" in msg) != make
