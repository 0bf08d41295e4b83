"""Composing the real config tree with Hydra's compose API: presets, types, and start-up errors."""

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from mltrain.config import ConfigError, register_configs, validate
from mltrain.multilevel import build_plan, control_steps, run_kind

register_configs()


def make(*overrides):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_default_config_is_the_cpu_demo():
    cfg = make()
    validate(cfg)
    assert cfg.model.n_layer == 4 and cfg.data.source == "embedded" and cfg.data.tokenizer == "bytes"
    assert cfg.optim.name == "sgd" and cfg.optim.lr == pytest.approx(1.2e-3)
    assert cfg.coarsening.scheme == "none" and run_kind(cfg) == "single"


def test_gpt22m_selects_the_gpt2_tokenizer_unless_overridden():
    cfg = make("model=gpt22m")
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.block_size) == (12, 256, 8, 256)
    assert cfg.data.tokenizer == "gpt2"
    assert make("model=gpt22m", "data.tokenizer=bytes").data.tokenizer == "bytes"


@pytest.mark.parametrize("preset", ["paper_single", "paper_multilevel", "schedule_control", "random_control",
                                    "stride3", "adamw_reset", "cpu_single", "cpu_multilevel",
                                    "cpu_schedule_control", "cpu_random_control", "cpu_stride3", "cpu_adamw_reset", "smoke"])
def test_every_preset_composes_and_validates(preset):
    cfg = make(f"experiment={preset}")
    validate(cfg)
    assert cfg.preset == preset
    assert build_plan(OmegaConf.merge(cfg, {"model": {"vocab_size": 256}}))


def test_paper_presets_carry_the_papers_numbers():
    cfg = make("experiment=paper_multilevel")
    assert cfg.train.max_steps == 16000 and cfg.schedule.warmup_steps == 715
    assert cfg.optim.lr == pytest.approx(1.2e-3) and cfg.schedule.min_lr == pytest.approx(1.2e-4)
    ml = cfg.multilevel
    assert (ml.n_cycles, ml.coarse_steps, ml.delta, ml.levels) == (35, 100, 0.25, 2)
    assert ml.coarse_schedule.name == "constant" and ml.coarse_optim.lr == pytest.approx(1.2e-3)
    assert cfg.coarsening.scheme == "stride" and cfg.coarsening.k == 2
    assert make("experiment=schedule_control").multilevel.control == "schedule"
    adamw = make("experiment=adamw_reset")
    assert adamw.optim.name == "adamw" and adamw.multilevel.coarse_optimizer_state == "reset"


def test_schedule_control_matches_coarse_flops_of_gpt22m():
    cfg = OmegaConf.merge(make("experiment=schedule_control"), {"model": {"vocab_size": 50257}})
    assert control_steps(cfg, 1) == 77  # 100 coarse steps x 0.769


def test_command_line_beats_the_preset():
    cfg = make("experiment=cpu_multilevel", "coarsening=stride3", "multilevel.delta=0.5")
    assert cfg.coarsening.k == 3 and cfg.multilevel.delta == 0.5


@pytest.mark.parametrize("override,exc", [
    ("train.max_step=10", ConfigCompositionException),  # misspelt key
    ("train.max_steps=abc", ConfigCompositionException),  # wrong type
    ("model=nonexistent", ConfigCompositionException),  # unknown option
    ("coarsening=foo", ConfigCompositionException),
])
def test_hydra_rejects_typos_and_wrong_types(override, exc):
    with pytest.raises(exc):
        make(override)


@pytest.mark.parametrize("overrides,needle", [
    (["coarsening=evenodd", "multilevel.delta=1.5"], "multilevel.delta=1.5 must be in [0, 1]"),
    (["coarsening=evenodd", "multilevel.delta=-0.1"], "must be in [0, 1]"),
    (["coarsening=stride3"], "model.n_layer=4 is not divisible by coarsening.k=3"),
    (["coarsening=evenodd", "multilevel.levels=4"], "more than the depth allows"),
    (["coarsening=evenodd", "coarsening.scheme=zigzag"], "coarsening.scheme='zigzag' is not one of"),
    (["coarsening=evenodd", "multilevel.coarse_steps=0"], "multilevel.coarse_steps=0 must be > 0"),
    (["coarsening=evenodd", "multilevel.n_cycles=-1"], "multilevel.n_cycles=-1 must be > 0"),
    (["train.max_steps=0"], "train.max_steps=0 must be > 0"),
    (["coarsening=evenodd", "multilevel.n_cycles=1000"], "must be fewer than train.max_steps=1000"),
    (["seed=-1"], "seed=-1 must be in [0, 2**32)"),
    (["coarsening=random", "coarsening.seed=-3"], "coarsening.seed=-3 must be null"),
    (["coarsening=evenodd", "coarsening.redraw=true"], "apply to the random scheme only"),
    (["train.batch_size=10", "train.grad_accum=3"], "divisible by train.grad_accum"),
    (["multilevel.control=schedule"], "needs a coarsening scheme"),
    (["model.n_head=5"], "divisible by model.n_head"),
    (["data=text"], "data=text needs data.path"),
    (["optim.name=lion"], "optim.name='lion' is not one of"),
])
def test_semantic_errors_have_one_clear_message(overrides, needle):
    with pytest.raises(ConfigError) as info:
        validate(make(*overrides))
    assert needle in str(info.value)
