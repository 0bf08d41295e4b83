"""Shared fixtures. `gpt2_cache` gives tiktoken's gpt2 files offline; every test gets private caches."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPT2_FIXTURES = REPO.parent / "shared" / "fixtures" / "gpt2-bpe"
# tiktoken's cache names: the sha1 of each file's download URL (see ../shared/fixtures/README.md).
GPT2_CACHE_NAMES = {
    "encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
}


@pytest.fixture(scope="session", autouse=True)
def _private_mltrain_cache(tmp_path_factory: pytest.TempPathFactory):
    """MLTRAIN_CACHE (token caches) and MLTRAIN_DATA (prepared shards) in a per-session temp dir."""
    root = tmp_path_factory.mktemp("mltrain_home")
    saved = {k: os.environ.get(k) for k in ("MLTRAIN_CACHE", "MLTRAIN_DATA")}
    os.environ["MLTRAIN_CACHE"] = str(root / "cache")
    os.environ["MLTRAIN_DATA"] = str(root / "data")
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def gpt2_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TIKTOKEN_CACHE_DIR holding copies of the gpt2 BPE files, set for the session (then restored)."""
    if not all((GPT2_FIXTURES / name).is_file() for name in GPT2_CACHE_NAMES):
        pytest.skip(f"GPT-2 BPE fixtures not found at {GPT2_FIXTURES} (tiktoken cannot download them offline)")
    folder = tmp_path_factory.mktemp("tiktoken_cache")
    for name, cache_name in GPT2_CACHE_NAMES.items():
        shutil.copyfile(GPT2_FIXTURES / name, folder / cache_name)
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    yield folder
    if saved is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = saved
