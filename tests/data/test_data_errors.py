"""Data that is not what it should be: a binary file (refused, or trained on with allow_binary), text with
a few undecodable bytes, shards without a validation shard, an unwritable or full token cache, a corrupt
tiktoken cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import SMOKE, compose_config, one_error, run_tool, run_tool_here

from mltrain.data import load_tokens, shards
from mltrain.core.errors import DataError


def test_an_unwritable_token_cache_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(run_tool_here("mltrain", *SMOKE, f"data.cache_dir={blocker}/cache", f"hydra.run.dir={tmp_path / 'run'}",
                              cwd=tmp_path))
    assert "token cache" in line and str(blocker) in line


def test_a_full_disk_while_tokenizing_leaves_no_cache_entry(tmp_path):
    cache = tmp_path / "cache"
    proc = run_tool("mltrain", *SMOKE, f"data.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
               limits={"RLIMIT_FSIZE": 100_000})  # the corpus' train split is ~1.6 MB
    line = one_error(proc)
    assert "cannot write the token cache" in line and "File too large" in line
    assert [p for p in cache.rglob("*") if p.is_file()] == []  # no partial entry, no temporaries


@pytest.mark.parametrize("kind", ["random bytes", "token shard"])
def test_a_binary_data_path_is_refused_naming_the_file(tmp_path, kind):
    path = tmp_path / "data.txt"
    rng = np.random.default_rng(0)
    if kind == "random bytes":
        path.write_bytes(rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    else:  # uint16 ids below 256: every other byte is NUL, which is valid UTF-8
        shards.write_shard(path, rng.integers(32, 127, 25_000))
    out = tmp_path / "out"
    line = one_error(run_tool_here("mltrain", *SMOKE, "data=text", f"data.path={path}", f"hydra.run.dir={out}", cwd=tmp_path))
    assert f"{path} is not UTF-8 text" in line and "data.allow_binary=true" in line
    assert not (out / "metrics.jsonl").exists()


def test_allow_binary_trains_on_it_and_the_cache_remembers(tmp_path, train_run):
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 60_000, dtype=np.uint8).tobytes())
    _, summary = train_run("data=text", f"data.path={path}", "data.allow_binary=true", "train.max_steps=2")
    assert summary["fine_steps"] == 2
    with pytest.raises(DataError, match="is not UTF-8 text"):  # the cached tokens do not bypass the check
        load_tokens(compose_config("data=text", f"data.path={path}").data)


def test_text_with_a_few_undecodable_bytes_is_still_text(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(("plain text line\n" * 500).encode() + b"caf\xe9 \x00 end\n")
    splits = load_tokens(compose_config("data=text", f"data.path={path}").data)
    assert len(splits.train[0]) > 7000


def test_a_shard_folder_without_a_validation_shard_says_which_it_used(tmp_path, caplog):
    for name in ("b.bin", "a.bin", "c.bin"):
        shards.write_shard(tmp_path / name, np.arange(5000) % 256)
    with caplog.at_level("WARNING"):
        splits = load_tokens(compose_config("data=shards", f"data.dir={tmp_path}", "data.tokenizer=bytes").data)
    assert "validation: a.bin, the first shard" in splits.description
    assert any("holding out its first shard, a.bin" in r.getMessage() for r in caplog.records)


def test_a_corrupt_tiktoken_cache_is_named_and_kept(tmp_path, monkeypatch):
    import tiktoken.registry

    from mltrain.data.tokenizers import get_tokenizer

    fixtures = next((p / "shared" / "fixtures" / "gpt2-bpe" for p in Path(__file__).resolve().parents
                     if (p / "shared" / "fixtures" / "gpt2-bpe").is_dir()), None)
    if fixtures is None:
        pytest.skip("GPT-2 BPE fixtures not found")
    from helpers import GPT2_CACHE_NAMES

    for name, cached in GPT2_CACHE_NAMES.items():
        data = (fixtures / name).read_bytes()
        (tmp_path / cached).write_bytes(data[:-100] if name == "vocab.bpe" else data)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "gpt2", raising=False)
    with pytest.raises(DataError) as err:
        get_tokenizer("gpt2")
    assert "is damaged" in str(err.value) and "download" not in str(err.value)
    assert (tmp_path / GPT2_CACHE_NAMES["vocab.bpe"]).exists()  # tiktoken would have deleted it
