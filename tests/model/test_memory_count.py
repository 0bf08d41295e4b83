"""The memory bound's parameter and buffer count is the model's own: checked against the model built on the
meta device for every kind of norm, bias and attention."""

import itertools

import pytest
import torch

from mltrain.model.gpt import GPT, GPTConfig
from mltrain.model.memory import parameter_count


@pytest.mark.parametrize("norm,affine,bias,attention", itertools.product(
    ["layernorm", "rmsnorm"], [False, True], [False, True], ["sdpa", "explicit"]))
def test_the_count_is_the_models(norm, affine, bias, attention):
    config = GPTConfig(n_layer=3, n_head=2, n_embd=24, block_size=16, vocab_size=301, norm=norm, norm_affine=affine,
                       bias=bias, attention=attention)
    with torch.device("meta"):
        model = GPT(config)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert parameter_count(config) == (params, buffers)


def test_the_papers_model_has_its_22368512_parameters():
    assert parameter_count(GPTConfig(n_layer=12, n_head=8, n_embd=256, block_size=256, vocab_size=50257))[0] == 22_368_512
