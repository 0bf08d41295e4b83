"""Shared fixtures (their helpers, and every other helper the tests share, are in tests/helpers.py):
`make_config` composes the real config tree at the tests' small size, `train_run` trains it into a run
dir; `gpt2_cache` gives tiktoken's gpt2 files offline; every test gets private caches. The end-to-end
runs in tests/e2e/ are marked slow, as a folder (`-m "not slow"` leaves them out)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import GPT2_CACHE_NAMES, GPT2_FIXTURES, compose_config, read_rows, typed  # noqa: F401

from mltrain.config import register_configs
from mltrain.data import load_tokens
from mltrain.run import run
from mltrain.runs.weights import save_weights

register_configs()

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under `-n auto` each core runs a worker: one thread each (in-process runs and the tools they start),
    # or OpenMP threads of the workers wait on each other.
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"

E2E = Path(__file__).resolve().parent / "e2e"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may use, and one more (many end-to-end tests wait on
    a child process, a signal or a timeout, leaving their core idle), at most 4 (the tests' models are
    tiny; more workers would only hold more copies of torch in memory)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) + 1))


def pytest_configure(config: pytest.Config) -> None:
    """Under `-n`, idle workers take tests from busy ones (the end-to-end runs take 100 times longer than
    most tests, so fixed shares leave a worker idle at the end)."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/e2e/ is an end-to-end run: marked slow, and run first, so that under `-n`
    the workers share the long runs and end together on short tests."""
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: E2E not in item.path.parents)  # stable: the order within each part is kept


@pytest.fixture
def make_config():
    return compose_config


@pytest.fixture
def train_run(tmp_path: Path):
    """train_run(*overrides, name="run") -> (metrics rows, summary): an in-process run under tmp_path."""

    def train(*overrides: str, name: str = "run", tiny: bool = True):
        run_dir = tmp_path / name
        run(typed(compose_config(*overrides, tiny=tiny)), run_dir=run_dir)
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


@pytest.fixture
def verdict(monkeypatch):
    """mltrain-compare's tuned verdict; the stand-in (helpers.standin_compare_dirs) where it is not there yet."""
    import mltrain.tools.compare as compare

    if not hasattr(compare, "compare_dirs"):
        import helpers

        monkeypatch.setattr(compare, "compare_dirs", helpers.standin_compare_dirs, raising=False)
    return compare


@pytest.fixture
def warm_cache():
    """The embedded corpus tokenized once, so a file-size limit hits the run's own files, not the cache."""
    load_tokens(compose_config().data)


@pytest.fixture
def weights_dir(tmp_path):
    """A run dir holding a small model's final weights (and nothing else)."""
    from mltrain.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    run_dir = tmp_path / "run"
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    return run_dir
