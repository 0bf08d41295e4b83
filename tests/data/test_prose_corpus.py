"""data=prose: the shipped English-prose corpus is the same bytes whatever else is installed, its sha256 is
the one the docs state, a damaged part is refused, and a run records the corpus in summary.json."""

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO

from mltrain.data import DataError, loader, load_tokens, prose

# What a process that has only the standard library and mltrain's files computes: mltrain and mltrain.data
# are made namespace stand-ins so that neither package's __init__ (numpy, omegaconf, ...) runs.
BARE = textwrap.dedent("""
    import hashlib, json, sys, types
    for name, path in (("mltrain", sys.argv[1]), ("mltrain.data", sys.argv[1] + "/data")):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    from mltrain.data import prose
    docs = prose.documents()
    h = hashlib.sha256()
    for name, text in docs:
        h.update(name.encode() + b"\\0" + text.encode() + b"\\0")
    print(json.dumps({"record": prose.record(), "documents": h.hexdigest(), "n": len(docs),
                      "modules": sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in
                                        ("numpy", "torch", "omegaconf", "datasets", "transformers"))}))
""")


def _documents_hash(docs) -> str:
    h = hashlib.sha256()
    for name, text in docs:
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def test_manifest_matches_the_shipped_parts():
    manifest = prose.manifest()
    whole = hashlib.sha256()
    for part in manifest["parts"]:
        packed = (prose.CORPORA / part["file"]).read_bytes()
        assert len(packed) < 10_000_000  # each shipped file under 10 MB
        assert hashlib.sha256(packed).hexdigest() == part["xz_sha256"]
        whole.update(lzma.decompress(packed))
    assert whole.hexdigest() == manifest["sha256"]
    docs = prose.documents()
    assert len(docs) == manifest["documents"] and sum(len(t.encode()) for _, t in docs) == manifest["bytes"]
    assert [n for n, _ in docs] == sorted({n for n, _ in docs})  # names unique and sorted
    assert {n.split("/")[0] for n, _ in docs} == {"sotu", "web"}


def test_same_corpus_in_a_bare_interpreter_without_site_packages():
    """-I -S: no site-packages (none of numpy, torch, datasets, ... importable), no user site, no PYTHON* env:
    another set of installed packages than this test process's, and the same documents and sha256."""
    out = subprocess.run([sys.executable, "-I", "-S", "-c", BARE, str(REPO / "mltrain")],
                         capture_output=True, text=True, timeout=120, cwd=REPO.parent)
    assert out.returncode == 0, out.stderr
    bare = json.loads(out.stdout)
    assert bare["modules"] == []  # nothing but the standard library was imported
    assert bare["record"] == prose.record()
    assert bare["n"] == len(prose.documents())
    assert bare["documents"] == _documents_hash(prose.documents())


def test_the_docs_state_the_corpus_sha256_and_size():
    text = (REPO / "docs" / "configuration.md").read_text()
    record = prose.record()
    assert record["sha256"] in text
    assert f"{record['documents']} documents" in text and f"{record['bytes']:,} bytes" in text


def test_a_damaged_part_is_refused_in_one_line(tmp_path, monkeypatch):
    for f in prose.CORPORA.iterdir():
        shutil.copy(f, tmp_path / f.name)
    part = tmp_path / prose.manifest()["parts"][-1]["file"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    monkeypatch.setattr(prose, "CORPORA", tmp_path)
    prose.documents.cache_clear()
    try:
        with pytest.raises(DataError, match=r"data=prose: .* is damaged .*reinstall mltrain") as err:
            prose.documents()
        assert "\n" not in str(err.value)
    finally:
        prose.documents.cache_clear()


def test_loaded_prose_records_the_corpus_and_splits_near_the_share(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_INSTALLED_LOADED", {})
    splits = load_tokens({"source": "prose", "tokenizer": "bytes", "cache_dir": str(tmp_path)})
    assert splits.corpus == prose.record()
    n_train, n_val = len(splits.train[0]), len(splits.val[0])
    assert 0.03 < n_val / (n_train + n_val) < 0.075
    assert n_train == 16_292_102  # docs/configuration.md; the studies' epochs on it: tests/tools/test_study.py


def test_a_run_on_prose_writes_the_corpus_into_its_summary(train_run, monkeypatch):
    monkeypatch.setattr(loader, "_INSTALLED_LOADED", {})
    _, summary = train_run("data=prose", "train.max_steps=2", "train.eval_interval=2")
    assert summary["corpus"] == prose.record()
    assert summary["corpus"]["sha256"] == prose.manifest()["sha256"]
