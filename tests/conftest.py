"""Shared fixtures. `make_config` composes the real config tree at the tests' small size, `train_run`
trains it into a run dir; `gpt2_cache` gives tiktoken's gpt2 files offline; every test gets private
caches."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from mltrain.config import register_configs
from mltrain.run import run
from mltrain.runs.files import METRICS, read_metrics

register_configs()

REPO = Path(__file__).resolve().parents[1]
GPT2_FIXTURES = REPO.parent / "shared" / "fixtures" / "gpt2-bpe"
# tiktoken's cache names: the sha1 of each file's download URL (see ../shared/fixtures/README.md).
GPT2_CACHE_NAMES = {
    "encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
}


# The tests' one training size: seconds on 2 CPU cores, big enough to learn. `ML` adds a short
# multilevel plan (3 cycles of 2 coarse models x 4 steps).
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=24", "train.eval_interval=12", "train.eval_batches=2", "train.log_interval=4",
        "train.progress=false", "schedule.warmup_steps=2"]
ML = ["coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=4", "multilevel.coarse_log_interval=2"]


def compose_config(*overrides: str, tiny: bool = True, hydra: bool = False):
    """The config `mltrain <overrides>` would run (at the tests' size unless tiny=False), with the depth
    methods registered now."""
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        return compose("config", overrides=[*(TINY if tiny else []), *overrides], return_hydra_config=hydra)


def read_rows(run_dir: Path) -> list[dict]:
    """The run's metrics rows, every line a whole row (runs/files.py read_metrics, strict)."""
    return read_metrics(run_dir / METRICS, strict=True)


@pytest.fixture
def make_config():
    return compose_config


@pytest.fixture
def train_run(tmp_path: Path):
    """train_run(*overrides, name="run") -> (metrics rows, summary): an in-process run under tmp_path."""

    def train(*overrides: str, name: str = "run", tiny: bool = True):
        run_dir = tmp_path / name
        run(compose_config(*overrides, tiny=tiny), run_dir=run_dir)
        return read_rows(run_dir), json.loads((run_dir / "summary.json").read_text())

    return train


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
