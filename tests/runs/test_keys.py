"""One fact, one rule: each test fails when two places that state a fact disagree.

The keys that do not change what a run computes (runs/keys.py) are read by the configuration label,
the sweep job's directory name and the resume check; an override string names its key one way; a label
is split into its overrides one way and leaves out the sections of the other methods."""

from __future__ import annotations

import pytest
from helpers import compose_config

from mltrain.config import bookkeeping_override_keys
from mltrain.method.kinds import RunKind
from mltrain.runs.keys import BOOKKEEPING_KEYS, override_key, seed_of
from mltrain.runs.names import run_label
from mltrain.training.resume import config_differences


# One override per entry of BOOKKEEPING_KEYS (hydra's own keys are never a job's overrides).
BOOKKEEPING = ["logger=wandb", "logger.mode=offline", "device=cpu", "train.compile=true", "train.progress=false",
               "train.resume=true", "train.checkpoint_interval=7", "train.keep_checkpoints=3",
               "data.cache_dir=/elsewhere", "data.prepare_if_missing=true", "train.peak_flops=1e15",
               "train.prefetch=false", "train.stop_check_interval=5", "train.compile=auto", "train.allow_long=true",
               "train.eval_batch_size=3", "plugins=[mltrain.method.stacking]"]
BASE = ["coarsening=evenodd", "multilevel.delta=0.5"]


def test_every_bookkeeping_key_has_a_case_here():
    assert set(BOOKKEEPING_KEYS) - {"hydra"} <= {override_key(o) for o in BOOKKEEPING}


def _dirname(*overrides: str) -> str:
    return compose_config(*overrides, tiny=False, hydra=True).hydra.job.override_dirname


@pytest.mark.parametrize("override", BOOKKEEPING)
def test_a_bookkeeping_key_changes_neither_label_nor_job_dir_nor_resume_check(override):
    plain, more = compose_config(*BASE), compose_config(*BASE, override)
    assert run_label([*BASE, override], RunKind.multilevel) == run_label(BASE, RunKind.multilevel)
    assert _dirname(*BASE, override) == _dirname(*BASE)
    assert config_differences(plain, more) == []


def test_a_key_that_changes_the_run_changes_all_three():
    other = "optim.lr=0.01"
    assert run_label([*BASE, other], RunKind.multilevel) != run_label(BASE, RunKind.multilevel)
    assert _dirname(*BASE, other) != _dirname(*BASE)
    assert config_differences(compose_config(*BASE), compose_config(*BASE, other)) == [
        "optim.lr (0.2 there, 0.01 here)"]  # the demo scale's tuned LR there


def test_the_seed_names_a_job_dir_but_not_a_configuration():
    assert _dirname("seed=1") != _dirname("seed=2")
    assert run_label(["seed=1"], RunKind.single) == run_label(["seed=2"], RunKind.single) == "default"


def test_hydra_excludes_exactly_the_bookkeeping_keys_spelled_out():
    cfg = compose_config(tiny=False, hydra=True)
    excluded = list(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert excluded == bookkeeping_override_keys()
    assert {"device", "train.compile", "logger", "logger.mode", "data.cache_dir"} <= set(excluded)
    assert "seed" not in excluded and "train.max_steps" not in excluded


def test_an_override_names_its_key_one_way():
    assert [override_key(o) for o in ("+a.b=1", "~a.b", "hydra/launcher=local", "logger@x=y", " seed = 3")] == [
        "a.b", "a.b", "hydra.launcher", "logger", "seed"]
    assert seed_of(["optim.lr=1", "+seed=4"]) == "4" and seed_of(["~seed"]) is None


@pytest.mark.parametrize("kind,kept,dropped", [
    (RunKind.single, [], ["multilevel.n_cycles=8", "coarsening=evenodd", "layer_drop.gamma=0.1", "raptr.fix_first=false"]),
    (RunKind.multilevel, ["multilevel.n_cycles=8", "coarsening=evenodd"], ["stacking.factor=4", "layer_drop.gamma=0.1"]),
    (RunKind.layer_drop, ["layer_drop.gamma=0.1"], ["multilevel.n_cycles=8", "stacking.factor=4", "raptr.fix_first=false"]),
])
def test_a_label_leaves_out_the_sections_of_other_methods(kind, kept, dropped):
    assert run_label(["optim.lr=0.1", *kept, *dropped], kind) == ",".join(sorted(["optim.lr=0.1", *kept]))


def test_one_rule_splits_a_label_into_its_overrides_list_values_included():
    from mltrain.runs.keys import label_overrides
    from mltrain.tools.compare.arms import arm_label, label_parts
    from mltrain.tools.compare.loading import label_family
    from mltrain.tools.study.plan import label_parts as study_label_parts

    label = "experiment=stacking,optim.lr=0.1,stacking.grow_at=[0.125,0.3],train.budget=0.5"
    assert label_overrides(label) == ["experiment=stacking", "optim.lr=0.1", "stacking.grow_at=[0.125,0.3]",
                                      "train.budget=0.5"]
    assert label_parts(label)["stacking.grow_at"] == "[0.125,0.3]" and len(label_parts(label)) == 4
    assert arm_label(label, ["optim.lr"]) == "experiment=stacking,stacking.grow_at=[0.125,0.3]"
    assert label_family(label) == "experiment=stacking,optim.lr=0.1,stacking.grow_at=[0.125,0.3]"
    assert study_label_parts(label, "stacking") == frozenset(label_overrides(label))
