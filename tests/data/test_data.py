"""Data layer: embedded corpus, tokenizers, text source, token cache, batch sampler, data configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from helpers import REPO

from mltrain.config import DataConfig
from mltrain.data import BatchSampler, DataError, TokenSplits, get_tokenizer, load_tokens
from mltrain.data import embedded
from mltrain.data.loader import validation_documents
from mltrain.data.tokenizers import Tokenizer


def cfg(**kw) -> DataConfig:
    return DataConfig(**kw)


def decode_bytes(a: np.ndarray) -> str:
    return bytes(np.asarray(a, dtype=np.uint8)).decode("utf-8")


# ---------------------------------------------------------------------------------------------
# Embedded corpus


def test_embedded_documents_size_and_names():
    docs = embedded.documents()
    names = [n for n, _ in docs]
    total = sum(len(t.encode()) for _, t in docs)
    assert 1_000_000 < total < 3_000_000, total
    assert len(docs) > 200
    assert names == sorted(names) and len(set(names)) == len(names)
    assert any(n.startswith("pydoc/") for n in names) and any(n.startswith("stdlib/") for n in names)
    assert not any("/test/" in n or n.startswith(("stdlib/idlelib", "stdlib/lib2to3")) for n in names)
    json_doc = dict(docs)["stdlib/json/__init__.py"]
    assert json_doc.startswith("JSON (JavaScript Object Notation)")
    assert "Serialize ``obj`` to a JSON formatted ``str``." in json_doc  # a function docstring


_SUBPROCESS = """
import hashlib, json, sys
from mltrain.data import embedded
from mltrain.data.loader import validation_documents
docs = embedded.documents()
names = [n for n, _ in docs]
flags = validation_documents(names, [len(t.encode()) for _, t in docs], 0.05)
print(json.dumps({
    "hash": hashlib.sha256(json.dumps(docs).encode()).hexdigest(),
    "fingerprint": embedded.fingerprint(),
    "val": [n for n, f in zip(names, flags) if f],
    "imported": [m for m in ("antigravity", "this", "turtle", "tkinter", "smtplib") if m in sys.modules],
}))
"""


def test_embedded_deterministic_across_processes_and_imports_nothing():
    docs = embedded.documents()
    names = [n for n, _ in docs]
    flags = validation_documents(names, [len(t.encode()) for _, t in docs], 0.05)
    import hashlib

    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True, env=env, check=True)
    other = json.loads(out.stdout)
    assert other["hash"] == hashlib.sha256(json.dumps(docs).encode()).hexdigest()
    assert other["fingerprint"] == embedded.fingerprint()
    assert other["val"] == [n for n, f in zip(names, flags) if f]
    assert other["imported"] == []  # modules are parsed, never imported


def test_embedded_split_is_by_document_and_cached():
    splits = load_tokens(cfg())
    assert isinstance(splits, TokenSplits)
    assert splits.tokenizer == "bytes" and splits.vocab_size == 256
    assert [a.dtype for a in splits.train + splits.val] == [np.uint16, np.uint16]
    assert isinstance(splits.train[0], np.memmap)
    assert "embedded" in splits.description and "val tokens" in splits.description
    docs = embedded.documents()
    names = [n for n, _ in docs]
    flags = validation_documents(names, [len(t.encode()) for _, t in docs], 0.05)
    val_docs = [t for (_, t), f in zip(docs, flags) if f]
    train_docs = [t for (_, t), f in zip(docs, flags) if not f]
    assert 1 <= len(val_docs) < len(train_docs)
    # the arrays are exactly the documents of each side, in corpus order, each followed by "\n\n"
    assert decode_bytes(splits.val[0]) == "".join(t + "\n\n" for t in val_docs)
    assert decode_bytes(splits.train[0]) == "".join(t + "\n\n" for t in train_docs)
    frac = len(splits.val[0]) / (len(splits.val[0]) + len(splits.train[0]))
    assert 0.03 < frac < 0.10, frac


def test_validation_documents_rule():
    names = [f"doc{i}" for i in range(100)]
    flags = validation_documents(names, [100] * 100, 0.05)
    assert sum(flags) == 5
    assert validation_documents(names, [100] * 100, 0.05) == flags  # stable
    assert validation_documents(list(reversed(names)), [100] * 100, 0.05) == list(reversed(flags))  # by name
    assert validation_documents(["a", "b"], [10, 10], 0.9) .count(True) == 1  # train keeps one
    with pytest.raises(DataError):
        validation_documents(["only"], [10], 0.05)


# ---------------------------------------------------------------------------------------------
# Tokenizers


def test_bytes_tokenizer():
    tok = get_tokenizer("bytes")
    assert (tok.name, tok.n_vocab, tok.eot_token) == ("bytes", 256, None)
    assert tok.encode("hé!") == [104, 195, 169, 33]
    assert tok.decode(tok.encode("naïve <|endoftext|>")) == "naïve <|endoftext|>"
    tokens, lengths = tok.encode_documents(["ab", "c"], separator="after")
    assert tokens.tolist() == [97, 98, 10, 10, 99, 10, 10] and lengths.tolist() == [4, 3]


def test_gpt2_tokenizer(gpt2_cache):
    tok = get_tokenizer("gpt2")
    assert isinstance(tok, Tokenizer)
    assert (tok.name, tok.n_vocab, tok.eot_token) == ("gpt2", 50257, 50256)
    assert tok.encode("Hello world, FineWeb-Edu!") == [15496, 995, 11, 17867, 13908, 12, 36, 646, 0]
    assert tok.decode([15496, 995]) == "Hello world"
    literal = tok.encode("a <|endoftext|> b")
    assert 50256 not in literal and tok.decode(literal) == "a <|endoftext|> b"  # ordinary text
    tokens, lengths = tok.encode_documents(["Hello", "world"], separator="before")
    assert tokens.tolist() == [50256, 15496, 50256, 6894] and lengths.tolist() == [2, 2]
    assert tokens.dtype == np.uint16


def test_unknown_tokenizer_lists_choices():
    with pytest.raises(DataError) as e:
        get_tokenizer("gtp2")
    msg = str(e.value)
    assert "data.tokenizer='gtp2'" in msg and "bytes" in msg and "gpt2" in msg and "cl100k_base" in msg


def test_offline_tokenizer_error_names_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: nothing cached
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):  # refused at once, never hangs
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(DataError) as e:
        get_tokenizer("r50k_base")
    msg = str(e.value)
    assert "could not download" in msg and "r50k_base" in msg and "offline" in msg
    assert "TIKTOKEN_CACHE_DIR" in msg and "data.tokenizer=bytes" in msg


# ---------------------------------------------------------------------------------------------
# Text source and the token cache


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    texts = {
        "a.txt": "Alpha document. " * 40,
        "b.md": "# Bravo\n\nA markdown file with <|endoftext|> inside. " * 30,
        "sub/c.txt": "Charlie: a nested text file, unicode ok: ü ñ 漢字. " * 25,
        "sub/d.md": "Delta notes. " * 50,
        "e.txt": "Echo. " * 60,
    }
    for name, body in texts.items():
        (root / name).write_text(body, encoding="utf-8")
    (root / "skip.py").write_text("print('not text data')\n")
    (root / ".git").mkdir()
    (root / ".git" / "notes.md").write_text("hidden: not text data either")
    return root


def text_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.suffix in (".txt", ".md") and ".git" not in p.parts]


def _all_text(splits: TokenSplits) -> tuple[str, str]:
    return decode_bytes(splits.train[0]), decode_bytes(splits.val[0])


def test_text_directory_split_by_document(corpus):
    splits = load_tokens(cfg(source="text", path=str(corpus), val_fraction=0.3))
    train, val = _all_text(splits)
    docs = {p.relative_to(corpus).as_posix(): p.read_text(encoding="utf-8") for p in text_files(corpus)}
    assert len(docs) == 5
    for name, body in docs.items():
        assert (body + "\n\n" in train) != (body + "\n\n" in val), name  # each document on exactly one side
    assert len((train + val).encode()) == sum(len(b.encode()) + 2 for b in docs.values())  # nothing else
    assert "not text data" not in train + val  # neither *.py nor hidden folders
    assert val and train
    assert "5 files" in splits.description


def test_text_glob_and_single_file(corpus):
    md = load_tokens(cfg(source="text", path=str(corpus / "**" / "*.md"), val_fraction=0.3))
    train, val = _all_text(md)
    assert "Bravo" in train + val and "Delta" in train + val and "Alpha" not in train + val

    single = corpus / "a.txt"
    one = load_tokens(cfg(source="text", path=str(single), val_fraction=0.25))
    train, val = _all_text(one)
    body = single.read_text()
    assert train + val == body  # one document, cut by position, no separator
    assert len(val) == round(len(body) * 0.25)


def test_text_with_gpt2_puts_eot_between_documents(corpus, gpt2_cache):
    splits = load_tokens(cfg(source="text", path=str(corpus), tokenizer="gpt2", val_fraction=0.3))
    assert splits.vocab_size == 50257 and splits.train[0].dtype == np.uint16
    tok = get_tokenizer("gpt2")
    n_docs = 5
    eots = sum(int((a == 50256).sum()) for a in splits.train + splits.val)
    assert eots == n_docs  # the literal "<|endoftext|>" in b.md stays ordinary text
    decoded = [tok.decode(splits.train[0]), tok.decode(splits.val[0])]
    for p in text_files(corpus):
        assert sum(p.read_text(encoding="utf-8") + "<|endoftext|>" in d for d in decoded) == 1, p


def test_text_missing_files_names_the_path(tmp_path):
    for path in (tmp_path / "nope.txt", tmp_path, str(tmp_path / "*.txt")):
        with pytest.raises(DataError, match="data.path=.*" + str(tmp_path.name)):
            load_tokens(cfg(source="text", path=str(path)))


def test_cache_reused_without_tokenizing_and_invalidated_by_content(corpus, tmp_path, monkeypatch):
    c = cfg(source="text", path=str(corpus), cache_dir=str(tmp_path / "cache"))
    first = load_tokens(c)
    cached = sorted((tmp_path / "cache" / "tokens").glob("*"))
    assert [p.name.split(".", 1)[1] for p in cached] == ["json", "train.bin", "val.bin"]
    mtimes = {p: p.stat().st_mtime_ns for p in cached}

    def boom(self, text):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(Tokenizer, "encode_array", boom)
    second = load_tokens(c)  # served from the cache: the tokenizer is never called
    assert np.array_equal(first.train[0], second.train[0]) and np.array_equal(first.val[0], second.val[0])
    assert {p: p.stat().st_mtime_ns for p in cached} == mtimes
    assert first.description == second.description

    (corpus / "e.txt").write_text("Echo changed. " * 60)  # new content -> new key -> tokenized again
    with pytest.raises(AssertionError, match="tokenized again"):
        load_tokens(c)
    monkeypatch.undo()
    third = load_tokens(c)
    assert "Echo changed." in "".join(_all_text(third))


def test_cache_rebuilds_a_damaged_entry(corpus, tmp_path):
    c = cfg(source="text", path=str(corpus), cache_dir=str(tmp_path / "cache"))
    good = load_tokens(c)
    expected = np.array(good.train[0])
    train_bin = next((tmp_path / "cache" / "tokens").glob("*.train.bin"))
    del good
    with open(train_bin, "r+b") as f:  # as if a writer died half-way through (without atomic rename)
        f.truncate(10)
    again = load_tokens(c)
    assert np.array_equal(np.asarray(again.train[0]), expected)
    assert not list((tmp_path / "cache" / "tokens").glob(".*.tmp"))  # no temporaries left behind


def test_load_tokens_accepts_dictconfig_with_interpolated_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MLTRAIN_CACHE", str(tmp_path / "envcache"))
    node = OmegaConf.structured(DataConfig)  # cache_dir is "${oc.env:MLTRAIN_CACHE,...}"
    splits = load_tokens(node)
    assert len(splits.train[0]) > 1_000_000
    assert list((tmp_path / "envcache" / "tokens").glob("embedded-bytes-*.json"))


# ---------------------------------------------------------------------------------------------
# Batch sampler


def _arrays() -> list[np.ndarray]:
    # array k holds k*10_000 + position, so a row tells which array and where it came from
    return [(k * 10_000 + np.arange(n)).astype(np.uint16) for k, n in enumerate([200, 33, 1000])]


def test_sampler_deterministic_shift_and_within_arrays():
    s = BatchSampler(_arrays(), batch_size=8, block_size=32, seed=7)
    x, y = s.batch(3)
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(y[:, -1] - x[:, -1], torch.ones(8, dtype=torch.int64))
    rows = torch.cat([x, y[:, -1:]], dim=1)
    diffs = rows[:, 1:] - rows[:, :-1]
    assert bool((diffs == 1).all())  # consecutive ids: never crosses into another array
    again = BatchSampler(_arrays(), batch_size=8, block_size=32, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(again.batch(3), (x, y)))
    other = BatchSampler(_arrays(), batch_size=8, block_size=32, seed=8)
    assert not torch.equal(other.batch(3)[0], x)
    assert not torch.equal(s.batch(4)[0], x)


def test_sampler_rank_slices_compose_global_batch():
    full = BatchSampler(_arrays(), batch_size=12, block_size=16, seed=1)
    for world in (2, 3, 4):
        parts = [BatchSampler(_arrays(), 12, 16, seed=1, rank=r, world_size=world).batch(5) for r in range(world)]
        assert all(p[0].shape == (12 // world, 16) for p in parts)
        assert torch.equal(torch.cat([p[0] for p in parts]), full.batch(5)[0])
        assert torch.equal(torch.cat([p[1] for p in parts]), full.batch(5)[1])
    with pytest.raises(DataError, match="divisible"):
        BatchSampler(_arrays(), 10, 16, seed=1, rank=0, world_size=3)


def test_sampler_state_dict_round_trip():
    a = BatchSampler(_arrays(), 4, 16, seed=3)
    for _ in range(5):
        a.next_batch()
    state = a.state_dict()
    assert state["position"] == 5
    b = BatchSampler(_arrays(), 4, 16, seed=99)
    b.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON/checkpoint round trip
    for _ in range(3):
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert a.position == b.position == 8


def test_sampler_picks_arrays_in_proportion_to_window_starts():
    arrays = [np.zeros(17, np.uint16), np.ones(1016, np.uint16)]  # 1 and 1000 valid starts (block 16)
    s = BatchSampler(arrays, batch_size=64, block_size=16, seed=0)
    picks = np.concatenate([s.windows(i)[0] for i in range(200)])
    share = (picks == 0).mean()
    assert 0 < share < 0.004  # expected 1/1001
    starts = np.concatenate([s.windows(i)[1][s.windows(i)[0] == 0] for i in range(200)])
    assert set(starts.tolist()) == {0}


def test_sampler_rejects_too_short_split_and_skips_a_short_array(caplog):
    with pytest.raises(DataError, match=r"val split has 20 tokens.*block_size \+ 1 = 33"):
        BatchSampler([np.arange(20, dtype=np.uint16)], 2, 32, seed=0, split="val")
    with pytest.raises(DataError, match=r"train split has 30 tokens \(arrays of 20, 10\)"):
        BatchSampler([np.zeros(20, np.uint16), np.zeros(10, np.uint16)], 2, 32, seed=0)
    arrays = [np.zeros(100, np.uint16), np.ones(5, np.uint16)]  # e.g. a short last shard
    s = BatchSampler(arrays, 16, 32, seed=0)
    assert "only 5 tokens" in caplog.text
    assert all(int(s.batch(i)[0].max()) == 0 for i in range(20))  # never drawn from


def test_sampler_over_real_tokens():
    splits = load_tokens(cfg())
    s = BatchSampler(splits.val, batch_size=4, block_size=64, seed=0)
    x, y = s.next_batch()
    assert int(x.max()) < splits.vocab_size and s.position == 1


# ---------------------------------------------------------------------------------------------
# Configs


@pytest.mark.parametrize("name", ["embedded", "text", "shards", "fineweb_edu"])
def test_data_yaml_matches_schema(name, monkeypatch):
    monkeypatch.setenv("MLTRAIN_DATA", "/data/x")
    node = OmegaConf.merge(OmegaConf.structured(DataConfig), OmegaConf.load(REPO / "conf" / "data" / f"{name}.yaml"))
    c = OmegaConf.to_object(node)
    assert c.source in ("embedded", "text", "shards")
    if name == "fineweb_edu":
        assert (c.source, c.tokenizer, c.dir) == ("shards", "gpt2", "/data/x/fineweb_edu_sample-10BT")
    if name == "embedded":
        assert (c.source, c.tokenizer) == ("embedded", "bytes")
