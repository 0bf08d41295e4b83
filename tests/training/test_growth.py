"""A stacking growth makes each block a copy of its source, with its optimizer state copied or reset."""

import pytest
import torch
from helpers import compose_config

from mltrain.method.stacking import Growth
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.training.growth import copy_blocks
from mltrain.training.optim import build_optimizer


def model(n_layer=4, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=64, n_layer=n_layer, n_embd=32, n_head=2, block_size=8))


@pytest.mark.parametrize("operator,depth,factor,sources", [
    ("stack", 2, 2, [0, 1, 0, 1]),
    ("interleave", 2, 2, [0, 0, 1, 1]),
    ("stack", 1, 4, [0, 0, 0, 0]),
    ("interleave", 3, 2, [0, 0, 1, 1, 2, 2]),
])
def test_a_growth_makes_each_block_a_copy_of_its_source_with_its_optimizer_state(operator, depth, factor, sources):
    m = model(n_layer=depth * factor)
    opt = build_optimizer(m.parameters(), compose_config("optim=adamw").optim, torch.device("cpu"))
    x = torch.randint(0, 64, (2, 8))
    m(x, x, blocks=m.blocks[:depth])[1].backward()  # the shallow model's step: state for its blocks only
    opt.step()
    before = [{k: v.clone() for k, v in m.blocks[i].state_dict().items()} for i in range(depth)]
    state_before = [[{k: v.clone() for k, v in opt.state[p].items()} for p in m.blocks[i].parameters()]
                    for i in range(depth)]
    params = [id(p) for p in m.parameters()]
    growth = Growth(operator, depth, factor, "copy")
    assert growth.sources() == sources
    copy_blocks(m, opt, growth)
    assert [id(p) for p in m.parameters()] == params  # the same parameters, new values
    for j, i in enumerate(sources):
        for key, value in m.blocks[j].state_dict().items():
            assert torch.equal(value, before[i][key]), (j, key)
        for p, expected in zip(m.blocks[j].parameters(), state_before[i]):
            assert all(torch.equal(opt.state[p][k], v) for k, v in expected.items())
    copy_blocks(m, opt, Growth(operator, depth, factor, "reset"))
    assert not opt.state
