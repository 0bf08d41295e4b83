"""train.compile=true on CPU: the fine model and each coarse model compile once per run; later cycles
compile nothing (dynamo's own counters). The CUDA variant is in test_cuda.py."""

import torch
from hydra import compose, initialize_config_module
from torch._dynamo.utils import counters

from mltrain.config import register_configs
from mltrain.run import build


register_configs()

TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=8", "train.eval_interval=4", "train.eval_batches=1", "train.progress=false",
        "device=cpu", "train.compile=true", "coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=2"]


def frames_compiled() -> int:
    return counters["frames"]["ok"]


def test_each_model_compiles_once_and_later_cycles_compile_nothing():
    torch._dynamo.reset()
    counters.clear()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=TINY)
    session = build(cfg, lambda row: None)
    runner, state = session.runner, session.trainer.state
    first_eval = next(i for i, p in enumerate(runner.plan) if p.kind == "evaluate")
    session.evaluator.log_eval(runner.fine)
    assert not runner.run(should_stop=lambda: state.phase_index > first_eval)  # cycle 0, all its phases
    after_first_cycle = frames_compiled()
    # The fine model (train and eval mode) and one graph for both coarse models: A and B run 2 blocks
    # each, and dynamo guards on how many blocks run, not on which.
    assert after_first_cycle == 3
    assert runner.run()  # cycles 1 and 2 (restrict, diagnostics, coarse A and B, prolong), fine steps, evals
    assert frames_compiled() == after_first_cycle
    assert state.coarse_steps == 3 * 2 * 2 and state.fine_steps == 8
