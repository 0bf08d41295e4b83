"""The rival depth methods are what their papers define: the blocks a seeded run draws, the keep
probabilities over steps, the weights after a stacking growth, the output scaling, the FLOPs of a step
that skips blocks; and they run in the one harness: end to end, resumed mid-stage, refused when bad."""

import math

import numpy as np
import pytest
import torch
from conftest import compose_config
from torch.utils.flop_counter import FlopCounterMode

from mltrain.config import validate
from mltrain.errors import CheckpointError, ConfigError
from mltrain.method.kinds import StepKind
from mltrain.method.layer_drop import LayerDrop, keep_probabilities
from mltrain.method.plan import build_plan
from mltrain.method.paths import SubPath
from mltrain.method.raptr import RandomPaths, path_lengths
from mltrain.method.stacking import Growth
from mltrain.model import GPT, GPTConfig
from mltrain.run import build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.training.flops import train_flops_per_token
from mltrain.training.optim import build_optimizer

RIVALS = ["stacking", "layer_drop", "raptr"]
DROPPING = ["layer_drop.gamma=0.3"]  # θ(t) near its floor after a few steps, so a 24-step run drops blocks


def model(n_layer=4, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=64, n_layer=n_layer, n_embd=32, n_head=2, block_size=8))


def frequencies(policy, steps, n_layer):
    runs = np.zeros(n_layer)
    for t in steps:
        runs[list(policy.path(t).blocks)] += 1
    return runs / len(steps)


# ---------------------------------------------------------------------------------------------
# Progressive layer dropping


def test_keep_probabilities_follow_the_papers_schedule():
    L, theta_bar, gamma = 12, 0.5, 0.001
    for t in (0, 1, 100, 1000, 5000, 100_000):
        theta = (1 - theta_bar) * math.exp(-gamma * t) + theta_bar
        expected = [1 - (l / L) * (1 - theta) for l in range(1, L + 1)]
        assert keep_probabilities(t, L, theta_bar, gamma) == pytest.approx(expected, abs=1e-12)
    assert keep_probabilities(0, L, theta_bar, gamma) == pytest.approx([1.0] * L)  # nothing dropped at first
    late = keep_probabilities(100_000, L, theta_bar, gamma)
    assert late[-1] == pytest.approx(theta_bar) and late[0] == pytest.approx(1 - (1 - theta_bar) / L)
    assert all(np.diff(late) < 0)  # deeper blocks are dropped more
    assert keep_probabilities(100_000, L, theta_bar, gamma, "uniform") == pytest.approx([theta_bar] * L)


def test_layer_drop_draws_each_block_with_its_keep_probability_and_scales_it_by_one_over_it():
    L = 6
    policy = LayerDrop(L, theta_bar=0.4, gamma=1.0, profile="linear", rescale=True, seed=3)
    steps = range(50, 6050)  # θ(t) = θ̄ to 1e-20 here
    keep = keep_probabilities(50, L, 0.4, 1.0)
    freq = frequencies(policy, steps, L)
    assert np.all(np.abs(freq - keep) < 4 * np.sqrt(keep * (1 - keep) / len(steps)) + 1e-9), (freq, keep)
    for t in (50, 51, 52):
        path = policy.path(t)
        assert list(path.blocks) == sorted(path.blocks)
        assert path.scales == pytest.approx([1 / keep[i] for i in path.blocks])
    # a pure function of (seed, step): another object, or the same step again, draws the same blocks
    again = LayerDrop(L, theta_bar=0.4, gamma=1.0, profile="linear", rescale=True, seed=3)
    assert [again.path(t) for t in steps[:50]] == [policy.path(t) for t in steps[:50]]
    other_seed = LayerDrop(L, theta_bar=0.4, gamma=1.0, profile="linear", rescale=True, seed=4)
    assert [other_seed.path(t) for t in steps[:50]] != [policy.path(t) for t in steps[:50]]
    assert policy.path(0) == SubPath(tuple(range(L)), (1.0,) * L)  # θ(0) = 1: every block, step 1


# ---------------------------------------------------------------------------------------------
# RaPTr


def test_raptr_draws_paths_of_the_stage_length_holding_the_fixed_blocks():
    L, p = 8, 5
    policy = RandomPaths(L, p, fixed=(0, L - 1), rescale=True, seed=7)
    steps = range(4000)
    for t in steps[:200]:
        path = policy.path(t)
        assert len(path.blocks) == p and list(path.blocks) == sorted(set(path.blocks))
        assert path.blocks[0] == 0 and path.blocks[-1] == L - 1
        assert path.scales == tuple(1.0 if i in (0, L - 1) else (L - 2) / (p - 2) for i in path.blocks)
    freq = frequencies(policy, steps, L)
    inside = (p - 2) / (L - 2)  # every free block is drawn equally often
    assert freq[0] == freq[-1] == 1.0
    assert np.all(np.abs(freq[1:-1] - inside) < 4 * np.sqrt(inside * (1 - inside) / len(steps)))
    assert [RandomPaths(L, p, (0, L - 1), True, 7).path(t) for t in range(20)] == [policy.path(t) for t in range(20)]
    assert RandomPaths(L, 3, (), False, 7).path(5).scales is None


def test_raptr_follows_the_papers_schedules_and_ends_on_the_full_model():
    def lengths(n_layer):
        return path_lengths(compose_config("experiment=raptr", f"model.n_layer={n_layer}"))

    assert lengths(12) == [6, 8, 10, 12] and lengths(24) == [12, 16, 20, 24] and lengths(6) == [3, 4, 5, 6]
    plan = build_plan(compose_config("experiment=raptr", "model.n_layer=6", "model.vocab_size=256"))
    assert [p.steps for p in plan] == [6, 6, 6, 6]
    assert [p.paths.length for p in plan[:3]] == [3, 4, 5] and plan[-1].paths is None


# ---------------------------------------------------------------------------------------------
# Progressive stacking


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
    growth.apply(m, opt)
    assert [id(p) for p in m.parameters()] == params  # the same parameters, new values
    for j, i in enumerate(sources):
        for key, value in m.blocks[j].state_dict().items():
            assert torch.equal(value, before[i][key]), (j, key)
        for p, expected in zip(m.blocks[j].parameters(), state_before[i]):
            assert all(torch.equal(opt.state[p][k], v) for k, v in expected.items())
    Growth(operator, depth, factor, "reset").apply(m, opt)
    assert not opt.state


# ---------------------------------------------------------------------------------------------
# Output scaling and FLOPs


def test_each_block_of_a_sub_path_takes_its_own_euler_step():
    m = model()
    x = torch.randint(0, 64, (3, 8))
    path = SubPath((0, 2, 3), (1.5, 0.5, 2.0))
    with torch.no_grad():
        h = m.wte(x) + m.wpe(torch.arange(8))
        for i, step in zip(path.blocks, path.scales):
            h = h + step * (m.blocks[i](h, 1.0) - h)  # x + h·F(x), F(x) = block(x) − x
        expected = m.lm_head(m.ln_f(h))
        torch.testing.assert_close(path.view(m)(x)[0], expected, atol=1e-5, rtol=1e-5)
        unit = SubPath((0, 2, 3), (1.0, 1.0, 1.0)).view(m)(x)[0]
        assert torch.equal(unit, SubPath((0, 2, 3)).view(m)(x)[0])  # steps of 1: the unscaled model, bitwise
        assert torch.equal(unit, m(x, blocks=[m.blocks[i] for i in (0, 2, 3)])[0])


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
        trainer.step(view, runner.fine_optimizer, 0.01, runner.samplers.fine, StepKind.fine)
    counted = trainer.state.flops - before
    tokens = 4 * 32  # train.batch_size x model.block_size
    assert counted == train_flops_per_token(view.n_blocks, 64, s.model.config.vocab_size, 32) * tokens
    assert abs(counter.get_total_flops() - counted) / counted < 0.02, (counter.get_total_flops(), counted)


# ---------------------------------------------------------------------------------------------
# In the harness: end to end, resume, bad input


def session(*overrides):
    return build(compose_config(*overrides), lambda row: None)


@pytest.mark.parametrize("method,extra", [("stacking", []), ("layer_drop", DROPPING), ("raptr", [])])
def test_each_rival_trains_end_to_end_with_fewer_flops_than_single_level(train_run, method, extra):
    rows, summary = train_run(f"experiment={method}", *extra, name=method)
    assert summary["status"] == "finished" and summary["run_kind"] == method and summary["fine_steps"] == 24
    assert math.isfinite(summary["final_val_loss"]) and summary["delta"] is None
    blocks = [r["blocks"] for r in rows if "train/loss" in r]
    assert min(blocks) < 4  # fewer blocks on some steps
    flops = lambda n_blocks: train_flops_per_token(n_blocks, 32, 256, 16) * 4 * 16  # noqa: E731 (batch 4 x 16)
    assert summary["total_flops"] < 24 * flops(4)  # single-level training: every block at every step
    if method == "layer_drop":  # each step cost what the blocks it drew cost
        policy = LayerDrop(4, theta_bar=0.5, gamma=0.3, profile="linear", rescale=True, seed=0)
        assert summary["total_flops"] == pytest.approx(sum(flops(len(policy.path(t).blocks)) for t in range(24)))
    if method == "stacking":  # 7 steps of the 2-block model, then the grown 4-block one
        assert blocks == [2.0, 2.5, 4.0, 4.0, 4.0, 4.0]
        assert summary["total_flops"] == pytest.approx(7 * flops(2) + 17 * flops(4))
    if method == "raptr":  # paths grow stage by stage, to the full model
        assert blocks == sorted(blocks) and blocks[-1] == 4


@pytest.mark.parametrize("overrides,stop_at", [
    (["experiment=stacking"], 4),  # inside the shallow stage
    (["experiment=stacking"], 7),  # the shallow stage's last step, before the growth
    (["experiment=stacking", "optim=adamw", "stacking.optimizer_state=copy", "stacking.operator=interleave"], 10),
    (["experiment=layer_drop", *DROPPING], 9),
    (["experiment=raptr"], 8),  # inside the second stage
])
def test_resume_mid_stage_is_exact(tmp_path, overrides, stop_at):
    whole = session(*overrides)
    assert whole.runner.run()

    first = session(*overrides)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.fine_steps >= stop_at)
    assert first.trainer.state.fine_steps == stop_at
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed = session(*overrides)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()

    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.trainer.state == whole.trainer.state


def test_a_checkpoint_of_another_rival_setting_is_refused(tmp_path):
    source = session("experiment=layer_drop")
    assert not source.runner.run(should_stop=lambda: source.trainer.state.fine_steps >= 2)
    path = save_checkpoint(tmp_path / "ckpt.pt", source.runner)
    with pytest.raises(CheckpointError, match="another plan .*theta_bar=0.5.* there, .*theta_bar=0.7"):
        load_checkpoint(path, session("experiment=layer_drop", "layer_drop.theta_bar=0.7").runner)


@pytest.mark.parametrize("overrides,needle", [
    (["experiment=stacking", "stacking.factor=3"], "model.n_layer=4 is not divisible by stacking.factor^len(stacking.grow_at)=3^1=3"),
    (["experiment=stacking", "stacking.grow_at=[0.2,0.6]", "model.n_layer=6"], "model.n_layer=6 is not divisible"),
    (["experiment=stacking", "stacking.factor=1"], "stacking.factor=1 must be >= 2"),
    (["experiment=stacking", "stacking.grow_at=[0.5,0.4]"], "must be increasing fractions of train.max_steps in (0, 1)"),
    (["experiment=stacking", "stacking.grow_at=[]"], "stacking.grow_at=[] has no growth"),
    (["experiment=stacking", "stacking.grow_at=[0.01]"], "every stage needs at least one"),
    (["experiment=layer_drop", "layer_drop.theta_bar=0"], "layer_drop.theta_bar=0.0 must be in (0, 1]"),
    (["experiment=layer_drop", "layer_drop.theta_bar=1.5"], "layer_drop.theta_bar=1.5 must be in (0, 1]"),
    (["experiment=layer_drop", "layer_drop.gamma=-0.1"], "layer_drop.gamma=-0.1 must be >= 0"),
    (["experiment=raptr", "raptr.path_lengths=[]"], "raptr.path_lengths=[] names no stage"),
    (["experiment=raptr", "raptr.path_lengths=[2,5]"], "must be between 1 and the depth (model.n_layer=4)"),
    (["experiment=raptr", "raptr.path_lengths=[2,3]"], "must end at the full model (4 blocks"),
    (["experiment=raptr", "raptr.path_lengths=[3,2,4]"], "must not decrease"),
    (["experiment=raptr", "raptr.path_lengths=[1,4]"], "cannot hold the 2 fixed blocks"),
    (["experiment=raptr", "raptr.stage_fractions=[0.5,0.5]"], "has 2 entries for 4 stages"),
    (["experiment=raptr", "raptr.path_lengths=[2,4]", "raptr.stage_fractions=[0.5,0.6]"], "must be positive and sum to 1"),
    (["experiment=raptr", "raptr.path_lengths=[2,4]", "raptr.stage_fractions=[0.01,0.99]"], "every stage needs at least one"),
    (["experiment=layer_drop", "coarsening=evenodd"], "depth_method=layer_drop trains sub-paths of the fine model"),
])
def test_bad_rival_settings_are_one_line_before_any_compute(overrides, needle):
    with pytest.raises(ConfigError) as info:
        validate(compose_config(*overrides))
    message = str(info.value)
    assert needle in message and "\n" not in message, message
