"""The vocabularies: a config's run kind is a registered run kind, coarse models are named by letters,
and every run kind says which method sections it reads."""

from __future__ import annotations

import pytest
from helpers import compose_config

from mltrain.method.kinds import RunKind, coarse_name, model_name
from mltrain.method.plan import run_kind
from mltrain.runs.keys import METHOD_KEYS


@pytest.mark.parametrize("overrides,kind", [
    ([], RunKind.single), (["experiment=multilevel"], RunKind.multilevel), (["coarsening=evenodd"], RunKind.multilevel),
    (["experiment=schedule_control"], RunKind.schedule_control), (["experiment=single", "coarsening=none"], RunKind.single),
    (["experiment=stacking"], RunKind.stacking), (["experiment=layer_drop"], RunKind.layer_drop),
    (["experiment=raptr"], RunKind.raptr),
])
def test_run_kind_is_a_run_kind(overrides, kind):
    got = run_kind(compose_config(*overrides))
    assert got is kind and isinstance(got, RunKind)


def test_coarse_models_are_named_by_letters():
    assert (coarse_name((0,)), coarse_name((1, 0)), model_name(()), model_name((0, 1))) == (
        "A", "B.A", "fine", "coarse A.B")


def test_every_run_kind_says_which_method_sections_it_reads():
    assert set(METHOD_KEYS) == set(RunKind)
