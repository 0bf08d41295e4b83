"""The held-out set is train.eval_tokens tokens of the validation split, chosen independently of the
training batch: the same sequences (and fingerprint) for every run of one data set, block size and
eval_tokens, whatever its batch size, gradient accumulation, seed, evaluation batch or ranks; evaluated
in batches of any size; its FLOPs counted once per evaluation, as the cost model plans them."""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest
import torch
from helpers import compose_config, one_error, tool_here, typed

from mltrain.data.sampler import BatchSampler
from mltrain.method.cost import plan_cost
from mltrain.run import build
from mltrain.training.evaluation import Evaluator

T = 16


def sampler(arrays, batch_size=4, seed=0):
    return BatchSampler(arrays, batch_size, T, seed=seed, split="val")


def test_the_held_out_windows_are_evenly_spread_and_owe_nothing_to_the_batch_or_the_seed():
    arrays = [np.arange(1000, dtype=np.uint16), np.arange(5000, 5600, dtype=np.uint16)]
    held = sampler(arrays).spread(20)
    assert held.shape == (2, 20, T)
    for other in (sampler(arrays, batch_size=1, seed=7), sampler(arrays, batch_size=64, seed=3)):
        assert torch.equal(other.spread(20), held)
    x, y = held.unbind(0)
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    assert torch.all(x[:, 1:] - x[:, :-1] == 1)  # every window lies inside one array
    starts = x[:, 0].tolist()
    assert any(s < 1000 for s in starts) and any(s >= 5000 for s in starts)  # both arrays sampled
    assert len(set(starts)) == 20 and all(b - a >= T for a, b in zip(starts, starts[1:]) if b > a)


def test_a_split_too_short_gives_the_windows_it_holds_and_says_so(caplog):
    arrays = [np.arange(200, dtype=np.uint16)]  # 184 starts: 11 windows of 16 that do not overlap
    with caplog.at_level(logging.WARNING):
        held = sampler(arrays).spread(100)
    assert held.shape[1] == 184 // T
    assert "fewer than the 100 asked (train.eval_tokens)" in caplog.text
    starts = held[0][:, 0].tolist()
    assert all(b - a >= T for a, b in zip(starts, starts[1:]))


def session(*overrides):
    return build(typed(compose_config("train.eval_tokens=200", "device=cpu", *overrides)), lambda row: None)


def test_runs_that_differ_in_batch_seed_or_evaluation_batch_share_one_held_out_set():
    base = session()
    record = base.evaluator.held_out()
    assert record["sequences"] == 13 and record["tokens"] == 13 * T and record["block_size"] == T  # ceil(200 / 16)
    for overrides in (["train.batch_size=8"], ["train.batch_size=2", "seed=5"], ["train.grad_accum=2"],
                      ["train.eval_batch_size=3"]):
        assert session(*overrides).evaluator.held_out() == record, overrides
    other = session("train.eval_tokens=400").evaluator.held_out()
    assert other["sequences"] == 25 and other["fingerprint"] != record["fingerprint"]


def test_the_evaluation_batch_changes_no_loss_and_the_flops_are_the_whole_sets():
    a, b = session("train.eval_batch_size=1"), session("train.eval_batch_size=64")
    b.model.load_state_dict(a.model.state_dict())
    assert len(a.evaluator.batches()) == 13 and len(b.evaluator.batches()) == 1
    loss_a, loss_b = a.evaluator.loss(a.runner.fine), b.evaluator.loss(b.runner.fine)
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    per_token = a.trainer.flops_per_token(a.model.config.n_layer) / 3
    assert a.evaluator.flops == pytest.approx(per_token * 13 * T)
    assert b.evaluator.flops == pytest.approx(a.evaluator.flops)


def test_the_cost_model_plans_the_held_out_tokens_whatever_the_batch():
    small, large = (plan_cost(compose_config("train.eval_tokens=200", f"train.batch_size={b}"), 256) for b in (2, 8))
    cfg = compose_config("train.eval_tokens=200")
    m = cfg.model
    from mltrain.core.flops import train_flops_per_token

    evaluations = 3  # steps 0, 12 and 24 of the tests' 24-step plan
    expected = evaluations * 13 * T * train_flops_per_token(m.n_layer, m.n_embd, 256, m.block_size) / 3
    assert small.measure == pytest.approx(expected) and large.measure == pytest.approx(expected)


@pytest.mark.parametrize("world", [2, 3, 5, 16])
def test_ranks_split_the_held_out_set_and_their_gathered_losses_are_the_whole_set_in_order(world):
    held = torch.arange(2 * 13 * T).reshape(2, 13, T)
    rows = []
    for rank in range(world):
        trainer = types.SimpleNamespace(world=types.SimpleNamespace(size=world, rank=rank), to_device=lambda b: b,
                                        device=torch.device("cpu"))
        ev = Evaluator(trainer, held, batch_size=4)
        got = [x[:k] for x, _, k in ev.batches()]
        assert all(len(x) == -(-4 // world) for x, _, _ in ev.batches())  # one shape: padded
        mine = torch.full((ev.per_rank, T), -1)
        if got:
            mine[: sum(len(x) for x in got)] = torch.cat(got)
        rows.append(mine)
    gathered = torch.cat(rows)[ev._kept]  # what gather_rows and the kept positions give
    assert torch.equal(gathered, held[0])


def test_train_eval_batches_is_refused_in_one_line_naming_eval_tokens(tmp_path):
    line = one_error(tool_here("mltrain", "scale=smoke", "train.eval_batches=2", cwd=tmp_path))
    assert "train.eval_batches=2" in line and "train.eval_tokens" in line
    assert not list(tmp_path.rglob("metrics.jsonl"))
