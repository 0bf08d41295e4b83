"""The CUDA path: bf16 autocast, fused optimizers, per-block compile. Skipped where there is no GPU."""

import json

import pytest
import torch
from conftest import compose_config

from mltrain.run import run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)"),
]

GPU = ["model.n_embd=64", "model.n_head=4", "model.block_size=64", "train.batch_size=16", "train.max_steps=40",
       "train.eval_interval=20", "optim=adamw", "optim.lr=3e-3", "coarsening=evenodd", "multilevel.n_cycles=3",
       "multilevel.coarse_steps=5"]


def _run(tmp_path, *extra):
    run(compose_config(*GPU, *extra), run_dir=tmp_path)
    return json.loads((tmp_path / "summary.json").read_text())


def test_multilevel_run_on_cuda_with_bf16_autocast(tmp_path):
    s = _run(tmp_path, "device=cuda")
    assert s["device"] != "cpu" and s["peak_memory_bytes"] > 0
    assert s["final_val_loss"] < s["initial_val_loss"] - 0.5
    assert s["coarse_steps"] == 3 * 2 * 5


def test_compiled_blocks_train_like_eager(tmp_path):
    eager = _run(tmp_path / "eager", "device=cuda", "train.dtype=float32")
    compiled = _run(tmp_path / "compiled", "device=cuda", "train.dtype=float32", "train.compile=true")
    assert compiled["final_train_loss"] == pytest.approx(eager["final_train_loss"], rel=0.05)
