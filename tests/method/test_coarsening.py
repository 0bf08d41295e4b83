"""Coarsening schemes: each subset scheme covers every block once, in depth order; stride3's groups;
the depth and step-scale checks; an unknown name lists the registered schemes."""

import types

import pytest

from mltrain.method.coarsening import CoarseningError, StepScale, scheme_class


def scheme(name, k=2, redraw=False, step_scale="unit"):
    return scheme_class(name)(k=k, redraw=redraw, step_scale=step_scale)


def partition(name, k, n, seed=(0,)):
    return scheme(name, k).partition(n, seed)


def selected(groups):
    return [g[0] for g in groups]


@pytest.mark.parametrize("scheme,k", [("stride", 2), ("stride", 3), ("random", 2), ("random", 3), ("random", 4)])
def test_subset_schemes_give_exact_covers(scheme, k):
    models = partition(scheme, k, 12, seed=[7, 0])
    assert len(models) == k
    chosen = sorted(i for groups in models for i in selected(groups))
    assert chosen == list(range(12))  # every block in exactly one coarse model
    for groups in models:
        assert len(groups) == 12 // k
        assert selected(groups) == sorted(selected(groups))  # depth order
        covered = [j for g in groups for j in g]
        assert covered == list(range(groups[0][0], 12))  # contiguous from the first selected block


def test_stride3_groups():
    a, b, c = partition("stride", 3, 12)
    assert a == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)]
    assert b == [(1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11)]
    assert selected(c) == [2, 5, 8, 11]


def coarsening_cfg(k=2, redraw=False, seed=None, step_scale="unit"):
    return types.SimpleNamespace(k=k, redraw=redraw, seed=seed, step_scale=step_scale)


@pytest.mark.parametrize("name,k,n_layer,levels,needle", [
    ("stride", 5, 12, 2, "not divisible by coarsening.k=5"),
    ("stride", 2, 12, 4, "more than the depth allows"),
    ("random", 2, 6, 3, "more than the depth allows"),
    ("average", 1, 12, 2, "must be >= 2"),
])
def test_depth_errors(name, k, n_layer, levels, needle):
    with pytest.raises(CoarseningError, match=needle):
        scheme_class(name).check_config(coarsening_cfg(k), n_layer, levels)
    scheme_class("stride").check_config(coarsening_cfg(2), 12, 3)  # 12 -> 6 -> 3 is fine


def test_unknown_scheme_names_the_registered_ones():
    with pytest.raises(CoarseningError, match=r"coarsening.scheme='zigzag' is not one of ") as info:
        scheme_class("zigzag")
    assert all(name in str(info.value) for name in ("average", "none", "random", "stride"))


@pytest.mark.parametrize("name,needle", [
    ("random", "the random scheme's are not"),
    ("none", "coarsening=none has none"),
])
def test_step_scale_is_refused_where_it_means_nothing(name, needle):
    with pytest.raises(CoarseningError, match=needle):
        scheme_class(name).check_config(coarsening_cfg(2, step_scale=StepScale.stride), 12, 2)
    scheme_class("stride").check_config(coarsening_cfg(2, step_scale=StepScale.stride), 12, 2)
    scheme_class("average").check_config(coarsening_cfg(2, step_scale=StepScale.stride), 12, 2)
