"""The optimizers a run builds: fused kernels by default on the CPU too, and what they change."""

from __future__ import annotations

import copy

import pytest
import torch

from mltrain.model.gpt import GPT, GPTConfig
from mltrain.optim_settings import OptimConfig, OptimName
from mltrain.training.optim import build_optimizer


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=32, n_layer=2, n_head=2, n_embd=16, block_size=8, norm_affine=True))


@pytest.mark.parametrize("name", [OptimName.sgd, OptimName.adamw])
def test_optim_fused_null_picks_the_fused_kernels_on_the_cpu_and_false_keeps_the_loop(name):
    model = _model()
    assert build_optimizer(model.parameters(), OptimConfig(name=name), torch.device("cpu")).defaults["fused"]
    assert not build_optimizer(model.parameters(), OptimConfig(name=name, fused=False),
                               torch.device("cpu")).defaults["fused"]


@pytest.mark.parametrize("name, exact", [(OptimName.sgd, True), (OptimName.adamw, False)])
def test_fused_and_looped_optimizers_train_to_the_same_weights(name, exact):
    """SGD's fused kernel gives the loop's result bit for bit; AdamW's equal up to float rounding."""
    models = {fused: _model() for fused in (False, True)}
    models[True].load_state_dict(copy.deepcopy(models[False].state_dict()))
    optimizers = {fused: build_optimizer(m.parameters(), OptimConfig(name=name, lr=1e-3, weight_decay=0.1, fused=fused),
                                         torch.device("cpu")) for fused, m in models.items()}
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        x, y = torch.randint(0, 32, (4, 8), generator=gen), torch.randint(0, 32, (4, 8), generator=gen)
        for fused, model in models.items():
            _, loss = model(x, y)
            loss.backward()
            optimizers[fused].step()
            optimizers[fused].zero_grad(set_to_none=True)
    for a, b in zip(models[False].parameters(), models[True].parameters()):
        if exact:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # 1% of one step of lr 1e-3
