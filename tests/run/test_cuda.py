"""The CUDA path: bf16 autocast, TF32, fused optimizers, flash attention, compile once per model.
Skipped where there is no GPU (scripts/gpu_check.sh runs them on one)."""

import json

import pytest
import torch
from omegaconf import OmegaConf
from torch._dynamo.utils import counters
from helpers import compose_config, typed

from mltrain.model.gpt import GPT, GPTConfig
from mltrain.run import build, run
from mltrain.training.optim import build_optimizer


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)"),
]
GPU = ["model.n_embd=64", "model.n_head=4", "model.block_size=64", "train.batch_size=16", "train.max_steps=40",
       "train.eval_interval=20", "optim=adamw", "optim.lr=3e-3", "coarsening=evenodd", "multilevel.n_cycles=3",
       "multilevel.coarse_steps=5"]


def _cfg(*extra):
    return compose_config(*GPU, *extra)


def _run(tmp_path, *extra):
    run(typed(_cfg(*extra)), run_dir=tmp_path)
    return json.loads((tmp_path / "summary.json").read_text())


def test_multilevel_run_on_cuda_with_bf16_autocast(tmp_path):
    s = _run(tmp_path, "device=cuda")
    assert s["device"] != "cpu" and s["peak_memory_bytes"] > 0
    assert s["final_val_loss"] < s["initial_val_loss"] - 0.5
    assert s["coarse_steps"] == 3 * 2 * 5


def test_build_on_cuda_turns_on_bf16_tf32_and_fused_optimizers():
    session = build(typed(_cfg("device=cuda")), lambda row: None)
    assert session.trainer.dtype == torch.bfloat16
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert session.runner.fine_optimizer.defaults["fused"]
    device = torch.device("cuda")
    params = [torch.nn.Parameter(torch.randn(4, 4, device=device))]
    for name in ("sgd", "adamw"):
        o = OmegaConf.create({"name": name, "lr": 1e-3, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0,
                              "betas": [0.9, 0.95], "eps": 1e-8})
        assert build_optimizer(params, o, device).defaults["fused"], name


def test_attention_runs_the_flash_kernel_under_bf16():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = GPT(GPTConfig(vocab_size=50257, n_layer=2, n_head=8, n_embd=256, block_size=256)).cuda()
    x = torch.randint(0, 50257, (4, 256), device="cuda")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(x, x)  # raises if the inputs do not qualify for flash attention
    loss.backward()
    assert torch.isfinite(loss)


def test_compiled_model_trains_like_eager(tmp_path):
    eager = _run(tmp_path / "eager", "device=cuda", "train.dtype=float32")
    compiled = _run(tmp_path / "compiled", "device=cuda", "train.dtype=float32", "train.compile=true")
    assert compiled["final_train_loss"] == pytest.approx(eager["final_train_loss"], rel=0.05)


def test_compile_once_per_model_on_cuda():
    torch._dynamo.reset()
    counters.clear()
    session = build(typed(_cfg("device=cuda", "train.compile=true")), lambda row: None)
    runner = session.runner
    first_eval = next(i for i, p in enumerate(runner.plan) if p.kind == "evaluate")
    session.evaluator.log_eval(runner.fine)
    assert not runner.run(should_stop=lambda: runner.position.phase_index > first_eval)
    after_first_cycle = counters["frames"]["ok"]
    assert after_first_cycle == 3  # fine (train, eval) and one graph for both 2-block coarse models
    assert runner.run()
    assert counters["frames"]["ok"] == after_first_cycle


def test_compile_auto_compiles_on_cuda_and_prefetches_batches_onto_it():
    session = build(typed(_cfg("device=cuda")), lambda row: None)  # train.compile=auto
    assert session.trainer.compiled
    x, y = session.runner.streams["fine"].next_batch()
    session.runner.streams["fine"].prefetch()
    assert x.is_cuda and y.is_cuda and session.runner.streams["fine"]._ready[1][0].is_cuda


def test_layer_dropping_compiles_one_graph_per_kept_count_on_cuda():
    from mltrain.method.kinds import PhaseKind

    cfg = compose_config("model.n_embd=64", "model.n_head=4", "model.block_size=64", "train.batch_size=16",
                         "train.max_steps=40", "train.eval_interval=100", "experiment=layer_drop",
                         "layer_drop.gamma=0.3", "device=cuda")
    session = build(typed(cfg), lambda row: None)
    counters.clear()
    phase = next(p for p in session.runner.plan if p.kind == PhaseKind.train)
    kept = {len(phase.paths.path(step).blocks) for step in range(phase.steps)}
    session.evaluator.log_eval(session.runner.fine)
    assert session.runner.run()
    assert counters["stats"]["unique_graphs"] == counters["frames"]["ok"] == len(kept) + 1  # and evaluation
