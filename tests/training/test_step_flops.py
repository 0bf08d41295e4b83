"""A step that skips blocks costs what its blocks cost, by torch's own FLOP counter."""

from torch.utils.flop_counter import FlopCounterMode
from helpers import compose_config, typed

from mltrain.core.flops import train_flops_per_token
from mltrain.method.kinds import StepKind
from mltrain.run import build


DROPPING = ["layer_drop.gamma=0.3"]  # θ(t) near its floor after a few steps, so a 24-step run drops blocks


def test_a_step_that_skips_blocks_costs_what_its_blocks_cost_by_torchs_counter():
    s = session("experiment=layer_drop", *DROPPING, "model.attention=explicit", "model.n_embd=64",
                "model.block_size=32")
    runner, trainer = s.runner, s.trainer
    policy = runner.plan[0].paths
    step = next(t for t in range(1, 100) if 0 < len(policy.path(t).blocks) < 4)  # a step that drops blocks
    view = runner.path_view(policy.path(step))
    before = trainer.state.flops
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.train_step(view, runner.fine_optimizer, 0.01, runner.streams["fine"], StepKind.fine)
    counted = trainer.state.flops - before
    tokens = 4 * 32  # train.batch_size x model.block_size
    assert counted == train_flops_per_token(view.n_blocks, 64, s.model.config.vocab_size, 32) * tokens
    assert abs(counter.get_total_flops() - counted) / counted < 0.02, (counter.get_total_flops(), counted)


def session(*overrides):
    return build(typed(compose_config(*overrides)), lambda row: None)
