"""The method layer reads a run's settings by attribute alone (mltrain/method/settings.py RunSettings): every
registered method's entry points give the same answer for the config Hydra composes and for its typed
object (`OmegaConf.to_object`, a `Config` dataclass), and the coarse levels' optimizer settings are a
typed `OptimConfig` that the optimizer builder takes."""

from __future__ import annotations

import pytest
import torch
from helpers import ML, compose_config
from omegaconf import OmegaConf

from mltrain.config import Config
from mltrain.core.errors import ConfigError
from mltrain.method.cost import plan_cost
from mltrain.method.multilevel import resolve_coarse_optim
from mltrain.method.plan import OwnOptimizer, budget_steps, build_plan, run_kind, train_phases
from mltrain.method.registry import method_class, method_for, method_names
from mltrain.optim_settings import OptimConfig, OptimName
from mltrain.training.optim import build_optimizer

VOCAB = 256  # the bytes tokenizer's

# One composed config per built-in method (and a few of their variants): the settings they read.
RUNS = {
    "single": [],
    "multilevel evenodd": ["experiment=multilevel", "coarsening=evenodd", *ML[1:]],
    "schedule control": ["experiment=multilevel", "coarsening=evenodd", "multilevel.control=schedule", *ML[1:]],
    "schedule_control preset": ["experiment=schedule_control", *ML[1:]],
    "average, 3 levels": ["coarsening=average", "multilevel.levels=3", *ML[1:]],
    "random, adamw coarse": ["experiment=random_control", "multilevel.coarse_optim.name=adamw",
                             "multilevel.coarse_optim.lr=0.01", *ML[1:]],
    "stacking": ["experiment=stacking"],
    "stacking interleave": ["experiment=stacking", "stacking.operator=interleave", "stacking.grow_at=[0.25,0.5]"],
    "layer_drop": ["experiment=layer_drop"],
    "raptr": ["experiment=raptr"],
    "raptr fixed stages": ["experiment=raptr", "raptr.path_lengths=[2,4]", "raptr.stage_fractions=[0.25,0.75]"],
}

# Settings a method refuses: the same one line from either kind of config.
REFUSED = {
    "coarse eps": ["coarsening=evenodd", "multilevel.coarse_optim.eps=0"],
    "cycles": ["coarsening=evenodd", "multilevel.n_cycles=100"],
    "delta": ["coarsening=evenodd", "multilevel.delta=2"],
    "stacking factor": ["experiment=stacking", "stacking.factor=1"],
    "layer_drop floor": ["experiment=layer_drop", "layer_drop.theta_bar=0"],
    "raptr lengths": ["experiment=raptr", "raptr.path_lengths=[2,3]"],
    "rival with coarsening": ["experiment=raptr", "coarsening=evenodd"],
}


def both(*overrides: str):
    """The composed config of `overrides` and its typed object."""
    cfg = compose_config(*overrides)
    typed = OmegaConf.to_object(cfg)
    assert isinstance(typed, Config)
    return cfg, typed


def refusal(cfg) -> str:
    with pytest.raises(ConfigError) as caught:
        method_for(cfg).check_config(budget_steps(cfg.train))
    return str(caught.value)


def test_the_runs_here_cover_every_built_in_method():
    built_in = {n for n in method_names() if method_class(n).__module__.startswith("mltrain.method.")}
    covered = {run_kind(compose_config(*overrides)) for overrides in RUNS.values()}
    assert covered == built_in


@pytest.mark.parametrize("overrides", RUNS.values(), ids=RUNS.keys())
def test_every_entry_point_gives_the_same_answer_for_the_composed_and_the_typed_config(overrides):
    cfg, typed = both(*overrides, f"model.vocab_size={VOCAB}")
    assert type(method_for(cfg)) is type(method_for(typed))
    assert run_kind(cfg) == run_kind(typed)
    for settings in (cfg, typed):
        method_for(settings).check_config(budget_steps(settings.train))
    plan = build_plan(cfg)
    assert plan and plan == build_plan(typed)
    assert plan_cost(cfg) == plan_cost(typed)
    assert method_for(cfg).identity() == method_for(typed).identity()


@pytest.mark.parametrize("overrides", RUNS.values(), ids=RUNS.keys())
def test_the_cost_model_fills_in_the_vocabulary_of_either_config_without_changing_it(overrides):
    cfg, typed = both(*overrides)
    assert cfg.model.vocab_size is None and typed.model.vocab_size is None
    assert plan_cost(cfg, VOCAB) == plan_cost(typed, VOCAB)
    assert cfg.model.vocab_size is None and typed.model.vocab_size is None


@pytest.mark.parametrize("overrides", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_setting_is_the_same_line_from_either_config(overrides):
    cfg, typed = both(*overrides, f"model.vocab_size={VOCAB}")
    assert refusal(cfg) == refusal(typed)


def test_the_coarse_optimizer_is_typed_settings_inheriting_the_fine_ones():
    cfg, typed = both(*ML, "optim=adamw", "optim.fused=false", "multilevel.coarse_optim.lr=0.05",
                      "multilevel.coarse_optim.betas=[0.8,0.9]")
    for settings in (cfg, typed):
        co = resolve_coarse_optim(settings.optim, settings.multilevel.coarse_optim)
        assert isinstance(co, OptimConfig) and co.name is OptimName.adamw and co.fused is False
        assert co.lr == 0.05 and co.betas == [0.8, 0.9] and co.eps == settings.optim.eps
    assert resolve_coarse_optim(cfg.optim, cfg.multilevel.coarse_optim) == resolve_coarse_optim(
        typed.optim, typed.multilevel.coarse_optim)


def test_a_coarse_phase_builds_its_optimizer_from_its_typed_settings():
    cfg = compose_config(*ML, "multilevel.coarse_optim.lr=0.05", "multilevel.coarse_optim.momentum=0.5")
    own = next(p.optimizer for p in train_phases(build_plan(cfg)) if p.optimizer is not None)
    assert isinstance(own, OwnOptimizer) and isinstance(own.settings, OptimConfig)
    opt = build_optimizer(torch.nn.Linear(2, 2).parameters(), own.settings, torch.device("cpu"))
    assert isinstance(opt, torch.optim.SGD)
    assert opt.defaults["lr"] == 0.05 and opt.defaults["momentum"] == 0.5
    assert opt.defaults["fused"]  # optim.fused=null, inherited: the fused kernel where the device has one
