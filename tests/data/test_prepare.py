"""mltrain-prepare on local FineWeb-Edu-like files with the real gpt2 encoding (offline fixtures)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import in_process
from mltrain.config import DataConfig
from mltrain.data import DataError, load_tokens
from mltrain.data import embedded, prepare, shards
from mltrain.data.prepare import PrepareConfig, run_prepare
from mltrain.data.tokenizers import Tokenizer, get_tokenizer


SHARD, VAL = 4000, 3000


def fineweb_rows() -> list[dict]:
    """FineWeb-Edu's columns, with real English text: slices of the embedded corpus' documents."""
    docs = [t for n, t in embedded.documents() if n.startswith("pydoc/")][:60]
    rows = []
    for i, text in enumerate(docs):
        body = text[: 400 + 37 * (i % 40)]
        if i == 7:
            body += "\nA literal <|endoftext|> inside a document is ordinary text."
        rows.append(
            {
                "text": body,
                "id": f"<urn:uuid:{i:08d}-0000-0000-0000-000000000000>",
                "dump": "CC-MAIN-2024-10",
                "url": f"https://example.org/page/{i}",
                "date": "2024-02-21T12:00:00Z",
                "file_path": f"s3://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/{i}.warc.gz",
                "language": "en",
                "language_score": 0.95,
                "token_count": len(body) // 4,
                "score": 3.25,
                "int_score": 3,
            }
        )
    return rows


@pytest.fixture(scope="module")
def local_files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fineweb_local")
    rows = fineweb_rows()
    table = pa.Table.from_pylist(rows)
    (root / "parquet").mkdir()
    pq.write_table(table.slice(0, 25), root / "parquet" / "000_00000.parquet", row_group_size=8)
    pq.write_table(table.slice(25), root / "parquet" / "000_00001.parquet", row_group_size=8)
    with open(root / "docs.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return {"rows": rows, "parquet": str(root / "parquet" / "*.parquet"), "jsonl": str(root / "docs.jsonl")}


def config(out: Path, data_files: str, **kw) -> PrepareConfig:
    base = dict(
        data_files=data_files, out_dir=str(out), shard_tokens=SHARD, val_tokens=VAL, workers=1,
        docs_per_task=8, progress=False, cache_dir=str(out.parent / "hf_cache"),
    )  # fmt: skip
    return PrepareConfig(**{**base, **kw})


def shard_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.bin"), key=lambda p: p.name.rsplit("_", 1)[1])  # by index: val 0 first


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in shard_files(out)}


def expected_stream(rows: list[dict]) -> np.ndarray:
    tok = get_tokenizer("gpt2")
    return np.concatenate([np.array([tok.eot_token] + tok.encode(r["text"]), dtype=np.uint16) for r in rows])


@pytest.fixture(scope="module")
def reference(local_files, tmp_path_factory, gpt2_cache) -> Path:
    """An uninterrupted 1-worker streaming run over the parquet files."""
    out = tmp_path_factory.mktemp("ref") / "shards"
    return run_prepare(config(out, local_files["parquet"]))


def test_parquet_shards_are_documents_joined_with_eot(reference, local_files):
    files = shard_files(reference)
    stream = expected_stream(local_files["rows"])
    n_train = -(-(len(stream) - VAL) // SHARD)
    assert [p.name for p in files] == ["fineweb_edu_val_000000.bin"] + [
        f"fineweb_edu_train_{i:06d}.bin" for i in range(1, n_train + 1)
    ]
    assert n_train >= 3
    parts = [shards.read_shard(p) for p in files]
    assert len(parts[0]) == VAL and all(len(p) == SHARD for p in parts[1:-1]) and 0 < len(parts[-1]) <= SHARD
    assert np.array_equal(np.concatenate(parts), stream)  # eot BEFORE each document, nothing lost or added
    assert int(stream[0]) == 50256
    text = get_tokenizer("gpt2").decode(np.concatenate(parts))
    assert text == "".join("<|endoftext|>" + r["text"] for r in local_files["rows"])
    state = json.loads((reference / prepare.STATE_FILE).read_text())
    assert state["done"] and state["tokens"] == len(stream)


def test_jsonl_non_streaming_gives_identical_shards(reference, local_files, tmp_path):
    out = run_prepare(config(tmp_path / "jsonl", local_files["jsonl"], streaming=False))
    assert shard_bytes(out) == shard_bytes(reference)


def test_two_workers_give_identical_shards(reference, local_files, tmp_path):
    out = run_prepare(config(tmp_path / "w2", local_files["parquet"], workers=2, docs_per_task=5))
    assert shard_bytes(out) == shard_bytes(reference)


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("streaming", [True, False])
def test_resume_after_interruption_is_byte_identical(reference, local_files, tmp_path, monkeypatch, streaming):
    out = tmp_path / "resumed"
    written = []

    def crash_after_two(path: Path) -> None:
        written.append(path.name)
        if len(written) == 2:
            raise Interrupted

    monkeypatch.setattr(prepare, "_after_shard", crash_after_two)
    with pytest.raises(Interrupted):
        run_prepare(config(out, local_files["parquet"], streaming=streaming))
    state = json.loads((out / prepare.STATE_FILE).read_text())
    assert not state["done"] and len(state["shards"]) == 2
    assert 0 < state["docs"] < len(local_files["rows"])
    (out / ".fineweb_edu_train_000002.bin.killed.tmp").write_bytes(b"half a shard")  # a killed write

    monkeypatch.setattr(prepare, "_after_shard", lambda path: written.append(path.name))
    run_prepare(config(out, local_files["parquet"], streaming=streaming))
    assert written[2] == "fineweb_edu_train_000002.bin"  # resumed after the two finished shards
    assert shard_bytes(out) == shard_bytes(reference)
    assert not list(out.glob(".*.tmp"))
    assert json.loads((out / prepare.STATE_FILE).read_text())["done"]


def test_max_tokens_caps_total_and_val_gets_a_tenth(reference, local_files, tmp_path):
    out = run_prepare(config(tmp_path / "capped", local_files["parquet"], max_tokens=9_000))
    parts = [shards.read_shard(p) for p in shard_files(out)]
    assert [len(p) for p in parts] == [900, SHARD, SHARD, 100]
    assert np.array_equal(np.concatenate(parts), expected_stream(local_files["rows"])[:9_000])


def test_rerun_done_is_a_no_op_and_other_settings_are_refused(reference, local_files):
    mtimes = {p: p.stat().st_mtime_ns for p in shard_files(reference)}
    run_prepare(config(reference, local_files["parquet"]))
    assert {p: p.stat().st_mtime_ns for p in shard_files(reference)} == mtimes
    with pytest.raises(DataError, match="other settings.*shard_tokens"):
        run_prepare(config(reference, local_files["parquet"], shard_tokens=SHARD * 2))


def test_out_dir_with_foreign_shards_is_refused(local_files, tmp_path, gpt2_cache):
    out = tmp_path / "foreign"
    out.mkdir()
    shards.write_shard(out / "theirs.bin", np.arange(10))
    with pytest.raises(DataError, match="not made by this preparation"):
        run_prepare(config(out, local_files["parquet"]))


def test_training_side_reads_prepared_shards(reference, local_files):
    splits = load_tokens(DataConfig(source="shards", dir=str(reference), tokenizer="gpt2"))
    stream = expected_stream(local_files["rows"])
    assert splits.vocab_size == 50257 and len(splits.val) == 1 and len(splits.train) >= 3
    assert np.array_equal(splits.val[0], stream[:VAL])
    assert np.array_equal(np.concatenate(splits.train), stream[VAL:])


def test_bad_inputs(local_files, tmp_path, gpt2_cache):
    with pytest.raises(DataError, match="prepare.data_files=.*matches no files"):
        run_prepare(config(tmp_path / "o1", str(tmp_path / "none" / "*.parquet")))
    with pytest.raises(DataError, match="prepare.text_field='body'"):
        run_prepare(config(tmp_path / "o2", local_files["jsonl"], text_field="body"))
    with pytest.raises(DataError, match="uint16"):
        prepare.check_shard_tokenizer(Tokenizer("cl100k_base", 100277, 100257))
    prepare.check_shard_tokenizer(get_tokenizer("gpt2"))


@pytest.fixture
def offline(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):  # refused at once, never hangs
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)


def test_hub_unreachable_says_offline_and_suggests_data_files(tmp_path, gpt2_cache, offline):
    with pytest.raises(DataError) as e:
        run_prepare(PrepareConfig(out_dir=str(tmp_path / "hub"), progress=False, cache_dir=str(tmp_path / "hf")))
    msg = str(e.value)
    assert "offline" in msg and "prepare.data_files=" in msg and "HuggingFaceFW/fineweb-edu" in msg


def test_prepare_if_missing_starts_the_preparation(tmp_path, gpt2_cache, offline):
    cfg = DataConfig(source="shards", dir=str(tmp_path / "auto"), tokenizer="gpt2", prepare_if_missing=True)
    with pytest.raises(DataError, match="offline"):  # it went for the Hub rather than stopping with the command
        load_tokens(cfg)


def test_hydra_entry_point_keeps_cwd_clean(local_files, tmp_path, gpt2_cache):
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    args = [
        f"prepare.data_files={local_files['jsonl']}", f"prepare.out_dir={out}", f"prepare.shard_tokens={SHARD}",
        f"prepare.val_tokens={VAL}", "prepare.workers=1", "prepare.progress=false", f"prepare.cache_dir={tmp_path / 'hf'}",
    ]  # fmt: skip
    entry = "mltrain.data.prepare:hydra_main"  # run in this process (helpers.in_process)
    done = in_process("mltrain-prepare", args, cwd, dict(os.environ), argv0="-c", entry=entry)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(cwd.iterdir()) == []
    assert len(shard_files(out)) >= 4
    logs = list(out.glob(".prepare_logs/*/.hydra/config.yaml"))
    assert len(logs) == 1 and "shard_tokens: 4000" in logs[0].read_text()

    bad = in_process("mltrain-prepare", ["prepare.shard_tokens=0", f"prepare.out_dir={out}"], cwd, dict(os.environ),
                     argv0="-c", entry=entry)
    assert bad.returncode == 2 and "prepare.shard_tokens=0 must be > 0" in bad.stdout + bad.stderr


def test_a_second_preparation_of_the_same_folder_waits(reference, local_files, tmp_path):
    import fcntl
    import threading

    out = tmp_path / "locked"
    out.mkdir()
    with open(out / prepare.LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as if another process (rank) were preparing this folder
        worker = threading.Thread(target=run_prepare, args=(config(out, local_files["parquet"]),))
        worker.start()
        worker.join(timeout=0.5)
        assert worker.is_alive() and not list(out.glob("*.bin"))  # waiting, nothing written
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert shard_bytes(out) == shard_bytes(reference)
