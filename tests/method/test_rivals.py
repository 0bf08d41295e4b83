"""The rival depth methods are what their papers define: the blocks a seeded run draws and the keep
probabilities over steps (layer dropping), RaPTr's paths and schedules; bad settings are one line before
any compute."""

import math

import numpy as np
import pytest
from helpers import compose_config, typed

from mltrain.config import validate
from mltrain.core.errors import ConfigError
from mltrain.method.layer_drop import LayerDrop, keep_probabilities
from mltrain.method.paths import SubPath
from mltrain.method.plan import build_plan
from mltrain.method.raptr import RandomPaths, path_lengths


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
        expected = [1 - (layer / L) * (1 - theta) for layer in range(1, L + 1)]
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
        validate(typed(compose_config(*overrides)))
    message = str(info.value)
    assert needle in message and "\n" not in message, message
