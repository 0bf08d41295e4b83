"""The model's size, its block-subset forward, and the analytic FLOP formula against torch's counter."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mltrain.core.flops import forward_flops_per_token, train_flops_per_step, train_flops_per_token
from mltrain.model.gpt import GPT, GPTConfig


def test_paper_model_has_22368512_parameters():
    model = GPT(GPTConfig(vocab_size=50257, n_layer=12, n_head=8, n_embd=256, block_size=256))
    assert model.num_params() == 22_368_512
    assert model.lm_head.weight is model.wte.weight  # tied


def test_affine_norms_and_biases_add_parameters():
    base = GPT(GPTConfig(vocab_size=256, n_layer=2, n_embd=64, n_head=2, block_size=16)).num_params()
    affine = GPT(GPTConfig(vocab_size=256, n_layer=2, n_embd=64, n_head=2, block_size=16, norm_affine=True))
    # two norms per block plus the final norm, weight only
    assert affine.num_params() == base + (2 * 2 + 1) * 64


def test_blocks_argument_runs_the_given_subset():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, n_layer=4, n_embd=32, n_head=2, block_size=16))
    idx = torch.randint(0, 256, (2, 16))
    full, _ = model(idx)
    assert torch.equal(full, model(idx, blocks=list(model.blocks))[0])
    sub, _ = model(idx, blocks=[model.blocks[0], model.blocks[2]])
    assert not torch.allclose(full, sub)


def test_explicit_attention_matches_sdpa():
    torch.manual_seed(0)
    cfg = dict(vocab_size=256, n_layer=2, n_embd=32, n_head=4, block_size=16)
    a = GPT(GPTConfig(**cfg))
    b = GPT(GPTConfig(**cfg, attention="explicit"))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 256, (3, 16))
    torch.testing.assert_close(a(idx)[0], b(idx)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_layer,n_embd,vocab,T", [(4, 128, 256, 64), (2, 64, 1000, 32), (3, 96, 512, 128)])
def test_analytic_flops_match_flop_counter(n_layer, n_embd, vocab, T):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, n_layer=n_layer, n_embd=n_embd, n_head=4, block_size=T,
                          attention="explicit"))
    B = 2
    idx = torch.randint(0, vocab, (B, T))
    counter = FlopCounterMode(display=False)
    with counter:
        _, loss = model(idx, idx)
        loss.backward()
    measured = counter.get_total_flops()
    analytic = train_flops_per_step(n_layer, n_embd, vocab, T, B)
    assert abs(measured - analytic) / measured < 0.02, (measured, analytic)


def test_coarse_step_of_paper_model_costs_about_078_of_a_fine_step():
    ratio = train_flops_per_token(6, 256, 50257, 256) / train_flops_per_token(12, 256, 50257, 256)
    assert 0.75 < ratio < 0.80  # the tied 50257x256 head dominates: not 0.5
    assert train_flops_per_token(12, 256, 50257, 256) == 3 * forward_flops_per_token(12, 256, 50257, 256)
