"""One judgment of input data at every entry point (data/inputs.py), and caches and sidecars trusted
no further than they can be: a shard rewritten in place (its size and mtime put back) is scanned again
and refused naming it before training; a token id beyond the vocabulary is one line wherever it comes
in; mltrain-prepare judges text as data=text does and names an empty file; model.json is compared with
the weights file's own header before anything is built; running out of memory in mltrain-sample is one
line."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from mltrain.data import inputs, shards
from mltrain.data.config import DataConfig
from mltrain.data.loader import load_tokens
from mltrain.data.sampler import BatchSampler
from mltrain.core.errors import DataError
from helpers import TOOL_SMOKE, edited_copy, made_once, refused, smoke_run, tool, tool_here

TINY = ["model.n_layer=2", "model.n_embd=16", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=2", "train.eval_tokens=64", "train.progress=false", "device=cpu"]
PREPARE = ["prepare.tokenizer=bytes", "prepare.shard_tokens=2000", "prepare.val_tokens=1000", "prepare.progress=false",
           "prepare.docs_per_task=4", "prepare.workers=1"]


def shard_folder(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    shards.write_shard(folder / "d_val_000000.bin", rng.integers(0, 256, 2000))
    shards.write_shard(folder / "d_train_000001.bin", rng.integers(0, 256, 5000))
    return folder / "d_train_000001.bin"


def rewrite_in_place(path: Path, position: int, token: int) -> None:
    """Change one token id inside the file, then put its modification time back (as `touch -r` would)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(shards.HEADER_BYTES + 2 * position)
        f.write(np.array([token], dtype="<u2").tobytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def test_a_shard_rewritten_in_place_with_its_old_mtime_is_refused_before_training(tmp_path):
    train = shard_folder(tmp_path / "shards")
    data = ["data=shards", f"data.dir={tmp_path / 'shards'}", "data.tokenizer=bytes"]
    first = tool_here("mltrain", *TINY, *data, f"hydra.run.dir={tmp_path / 'first'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "shards" / shards.SIDECAR).exists()  # the scan is remembered
    rewrite_in_place(train, 1234, 300)
    line = refused(tool_here("mltrain", *TINY, *data, f"hydra.run.dir={tmp_path / 'second'}", cwd=tmp_path), str(train))
    assert "token id 300" in line and "1,234" in line and "data.tokenizer" in line
    assert not (tmp_path / "second" / "metrics.jsonl").exists()  # before training


def test_every_batch_is_checked_against_the_vocabulary(tmp_path):
    path = tmp_path / "x.bin"
    shards.write_shard(path, np.arange(400) % 200)
    arrays = [shards.read_shard(path)]
    sampler = BatchSampler(arrays, 4, 8, seed=0, vocab_size=256)
    sampler.batch(0)
    with pytest.raises(DataError, match=f"{path}: token id 199 .* is >= 100"):  # a tokenizer of 100 ids
        BatchSampler(arrays, 64, 8, seed=0, vocab_size=100).batch(0)


def _edit_cached_train(tmp_path, cfg, meta_too: bool):
    (tmp_path / "notes.txt").write_text("some text to train on.\n" * 400)
    good = np.asarray(load_tokens(cfg).train[0]).copy()
    cached = next((tmp_path / "c").rglob("*train*"))
    data = bytearray(cached.read_bytes())
    data[10:12] = np.array([60000], dtype=np.uint16).tobytes()
    cached.write_bytes(bytes(data))
    if meta_too:  # its checksums made to agree: only the vocabulary check is left to catch it
        meta_path = next((tmp_path / "c").rglob("*.json"))
        meta = json.loads(meta_path.read_text())
        meta["checksums"]["train"] = [hashlib.sha256(bytes(data)).hexdigest()]
        meta_path.write_text(json.dumps(meta))
    return good


def test_a_token_cache_changed_under_its_meta_is_rebuilt(tmp_path):
    cfg = DataConfig(source="text", path=str(tmp_path / "notes.txt"), tokenizer="bytes", cache_dir=str(tmp_path / "c"))
    good = _edit_cached_train(tmp_path, cfg, meta_too=False)
    assert np.array_equal(load_tokens(cfg).train[0], good)  # its checksum fails: rebuilt (data/cache.py)


def test_a_token_cache_changed_with_its_checksums_is_one_line(tmp_path):
    cfg = DataConfig(source="text", path=str(tmp_path / "notes.txt"), tokenizer="bytes", cache_dir=str(tmp_path / "c"))
    _edit_cached_train(tmp_path, cfg, meta_too=True)
    with pytest.raises(DataError, match="the token cache.*token id 60000"):
        load_tokens(cfg)


def test_a_text_file_rewritten_in_place_with_its_old_mtime_is_read_again(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("aaaa bbbb cccc.\n" * 400)
    cfg = DataConfig(source="text", path=str(path), tokenizer="bytes", cache_dir=str(tmp_path / "c"))
    first = np.asarray(load_tokens(cfg).train[0]).copy()
    st = os.stat(path)
    path.write_text("dddd eeee ffff.\n" * 400)  # the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = np.asarray(load_tokens(cfg).train[0])
    assert len(first) == len(second) and not np.array_equal(first, second)


# ---------------------------------------------------------------------------------------------
# Lossy or empty input: the same judgment for mltrain-prepare as for data=text


def prepare(tmp_path: Path, data: Path, *extra: str):
    return tool_here("mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={tmp_path / 'out'}",
                     f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE, *extra, cwd=tmp_path)


@pytest.mark.parametrize("content, says", [(b"", "is empty (0 bytes)"), (b"\n\n\n", "holds no documents")])
def test_prepare_names_an_empty_jsonl_in_one_line(tmp_path, content, says):
    data = tmp_path / "docs.jsonl"
    data.write_bytes(content)
    line = refused(prepare(tmp_path, data), says)
    assert "StopIteration" not in line and "docs.jsonl" in line


def test_prepare_and_data_text_refuse_the_same_undecodable_file(tmp_path):
    data = tmp_path / "blob.txt"
    data.write_bytes(np.random.default_rng(0).integers(0, 256, 30_000, dtype=np.uint8).tobytes())
    line = refused(prepare(tmp_path, data), str(data))
    assert "is not UTF-8 text" in line and "prepare.allow_binary=true" in line
    assert not list((tmp_path / "out").glob("*.bin"))
    line = refused(tool_here("mltrain", *TOOL_SMOKE, "data=text", f"data.path={data}", f"hydra.run.dir={tmp_path / 'run'}",
                             cwd=tmp_path), str(data))
    assert "is not UTF-8 text" in line and "data.allow_binary=true" in line
    taken = prepare(tmp_path, data, "prepare.allow_binary=true")
    assert taken.returncode == 0 and "taking it anyway (prepare.allow_binary=true)" in taken.stderr


def test_a_few_undecodable_bytes_are_taken_with_one_warning_by_both(tmp_path):
    data = tmp_path / "few.txt"
    data.write_bytes(b"caf\xe9 au lait. " * 5 + b"plain text to tokenize here. " * 800)
    said = [line for line in prepare(tmp_path, data).stderr.splitlines() if "could not be decoded" in line]
    assert len(said) == 1 and "5 characters" in said[0] and str(data) in said[0]
    run = tool_here("mltrain", *TOOL_SMOKE, "train.max_steps=2", "data=text", f"data.path={data}",
                    f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert run.returncode == 0 and sum("could not be decoded" in line for line in run.stderr.splitlines()) == 1


def test_input_files_are_named_when_empty(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "b.jsonl").write_text("")
    inputs.check_files([tmp_path / "a.jsonl"], "k")
    with pytest.raises(DataError, match=r"k: .*b.jsonl is empty"):
        inputs.check_files([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], "k")


# ---------------------------------------------------------------------------------------------
# Weights: the header first; memory that runs out


@pytest.fixture(scope="module")
def weights_run(tmp_path_factory) -> Path:
    return made_once(tmp_path_factory, "smoke_run", smoke_run) / "run"  # once for the whole suite




NO_ROOM = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))"


@pytest.mark.parametrize("model, named", [({"n_layer": 100_000}, "blocks: 100000 in model.json, 2 in model.safetensors"),
                                          ({"vocab_size": 50_000}, "wte.weight: [50000, 32] in model.json"),
                                          ({"block_size": 4096}, "wpe.weight: [4096, 32] in model.json")])
def test_model_json_is_compared_with_the_weights_header_before_anything_is_built(weights_run, tmp_path, model, named):
    run = edited_copy(weights_run, tmp_path / "edited", "model.json", lambda info: info["model"].update(model))
    for name, args in (("mltrain-sample", [str(run), "--max-new-tokens", "3"]), ("mltrain-export", [str(run), str(tmp_path / "o")])):
        line = refused(tool(name, *args, cwd=tmp_path, before=NO_ROOM), "does not match the model in model.json")
        assert named in line and "nothing was built" in line
    assert not (tmp_path / "o").exists()


OUT_OF_MEMORY = """
from mltrain.runs import weights
class _NoRoom:
    def __init__(self, *a, **k):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4000000000 bytes")
weights.GPT = _NoRoom
"""


def test_running_out_of_memory_in_sample_is_one_line(weights_run, tmp_path):
    line = refused(tool("mltrain-sample", str(weights_run), "--max-new-tokens", "3", cwd=tmp_path, before=OUT_OF_MEMORY),
                   "ran out of memory")
    assert "can't allocate memory" in line


def test_a_memory_error_in_a_tool_is_one_line_and_other_errors_keep_their_traceback(capsys):
    import argparse

    from mltrain.core.errors import tool_main

    parser = argparse.ArgumentParser(prog="t")

    def bad_alloc(args):
        raise MemoryError("std::bad_alloc")

    assert tool_main("t", parser, bad_alloc, []) == 2
    assert capsys.readouterr().err.startswith("t: error: ran out of memory (std::bad_alloc)")
    with pytest.raises(RuntimeError, match="a bug"):
        tool_main("t", parser, lambda a: (_ for _ in ()).throw(RuntimeError("a bug")), [])
