"""The one cost model (mltrain/method/cost.py): every phase of a plan counted at the model it trains,
as the run itself counts it; used by the run's start-up estimate, the study's duration check and ETA."""

from __future__ import annotations

import pytest
from helpers import ML, compose_config

from mltrain.core.flops import train_flops_per_token
from mltrain.method.cost import plan_cost
from mltrain.method.plan import TrainPhase, build_plan, train_phases

VOCAB = 256  # the bytes tokenizer's


def per_step(cfg, blocks: int, batch: int) -> float:
    m = cfg.model
    return train_flops_per_token(blocks, m.n_embd, VOCAB, m.block_size) * batch * m.block_size


def test_a_multilevel_plan_counts_its_coarse_steps_at_the_coarse_depth_and_batch():
    cfg = compose_config(*ML, "multilevel.coarse_batch_size=8", "data.tokenizer=bytes")
    cost = plan_cost(cfg, VOCAB)
    fine = 24 * per_step(cfg, 4, 4)
    coarse = 3 * 2 * 4 * per_step(cfg, 2, 8)  # 3 cycles x 2 coarse models x 4 steps, 2 blocks, batch 8
    assert cost.train == pytest.approx(fine + coarse)
    assert cost.steps == 24 + 24
    single = plan_cost(compose_config("data.tokenizer=bytes"), VOCAB)
    assert single.train == pytest.approx(fine) and single.steps == 24
    # evaluations at steps 0, 12, 24 (forward: a third), diagnostics once per coarse model and cycle
    assert single.measure == pytest.approx(3 * 2 * per_step(cfg, 4, 4) / 3)
    assert cfg.multilevel.eval_every_cycle  # and once more after each cycle
    assert cost.measure == pytest.approx(2 * single.measure + 6 * (per_step(cfg, 2, 4) + per_step(cfg, 4, 4)))


def test_the_schedule_control_costs_its_stand_in_fine_steps_at_the_coarse_batch():
    cfg = compose_config(*ML, "multilevel.control=schedule", "multilevel.coarse_batch_size=8", "data.tokenizer=bytes")
    cost = plan_cost(cfg, VOCAB)
    plan = build_plan(_resolved(cfg))
    stand_in = sum(p.steps for p in plan if isinstance(p, TrainPhase) and p.stands_in_for)
    assert stand_in > 0 and cost.train == pytest.approx(24 * per_step(cfg, 4, 4) + stand_in * per_step(cfg, 4, 8))
    assert cost.measure == pytest.approx(6 * 2 * per_step(cfg, 4, 4) / 3)  # 6 evaluations, no diagnostics


@pytest.mark.parametrize("rival", ["stacking", "raptr"])
def test_a_rivals_stages_cost_the_blocks_they_run(rival):
    cfg = compose_config(f"experiment={rival}", "data.tokenizer=bytes")
    cost = plan_cost(cfg, VOCAB)
    blocks = sum(len(p.paths.path(i).blocks) if p.paths else 4 for p in train_phases(build_plan(_resolved(cfg)))
                 for i in range(p.steps))  # every step asked (the cost model asks at most 64 per phase)
    assert cost.train == pytest.approx(sum(per_step(cfg, 1, 4) - per_step(cfg, 0, 4) for _ in range(blocks))
                                       + 24 * per_step(cfg, 0, 4))
    assert cost.train < plan_cost(compose_config("data.tokenizer=bytes"), VOCAB).train


def _resolved(cfg):
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.model.vocab_size = VOCAB
    return cfg
