"""Composing the real config tree with Hydra's compose API: presets, types, and start-up errors."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from helpers import REPO, compose_config, typed

from mltrain.config import validate
from mltrain.core.errors import ConfigError, composition_line
from mltrain.model.memory import parameter_count
from mltrain.method.multilevel import control_ratio, control_steps
from mltrain.method.plan import build_plan, run_kind
from mltrain.method.registry import NONE, depth_method_values, method_names
from mltrain.model.settings import model_config
from mltrain.runs.keys import override_key


METHODS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))  # the method presets
RIVALS = [name for name in depth_method_values() if name != NONE]  # chosen by name: their run kind is their name
SCALES = ["demo", "cpu", "paper", "smoke"]


def make(*overrides):
    return compose_config(*overrides, tiny=False)


def test_default_config_is_the_cpu_demo():
    cfg = make()
    validate(typed(cfg))
    assert cfg.model.n_layer == 4 and cfg.data.source == "embedded" and cfg.data.tokenizer == "bytes"
    assert cfg.optim.name == "sgd" and cfg.coarsening.scheme == "none" and run_kind(cfg) == "single"


@pytest.mark.parametrize("scale,lr,coarse_lr", [("demo", 0.2, 0.1), ("cpu", 0.2, 0.05), ("paper", 1.2e-3, 1.2e-3)])
@pytest.mark.parametrize("method", ["multilevel", "schedule_control", "random_control", None])
def test_the_scale_carries_its_lrs_for_every_method(scale, lr, coarse_lr, method):
    """The CPU scales carry the LRs their sweeps chose (conf/scale/*.yaml), the paper's scale the paper's;
    the method presets take them as they are, and `coarsening=evenodd` alone does too."""
    cfg = make(f"scale={scale}", *([f"experiment={method}"] if method else ["coarsening=evenodd"]))
    assert cfg.optim.lr == pytest.approx(lr) and cfg.multilevel.coarse_optim.lr == pytest.approx(coarse_lr)


def test_gpt22m_selects_the_gpt2_tokenizer_unless_overridden():
    cfg = make("model=gpt22m")
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.block_size) == (12, 256, 8, 256)
    assert cfg.data.tokenizer == "gpt2"
    assert make("model=gpt22m", "data.tokenizer=bytes").data.tokenizer == "bytes"


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("method", METHODS)
def test_every_method_composes_at_every_scale(method, scale):
    cfg = make(f"experiment={method}", f"scale={scale}")
    if method != "stride3" or scale in ("cpu", "paper"):  # stride3 needs a depth divisible by 3
        validate(typed(cfg))
        assert build_plan(OmegaConf.merge(cfg, {"model": {"vocab_size": 256}}))
    assert cfg.preset == method and cfg.scale == scale
    # a preset named after a registered method runs it (a rival is chosen by name); the others are multilevel
    # training with a scheme or an optimizer of their own
    assert run_kind(cfg) == (method if method in method_names() else "multilevel")


def test_scale_and_method_are_orthogonal():
    """The scale sets the size and the plan's length; the method sets what is trained and how."""
    cpu, paper = make("experiment=adamw_reset", "scale=cpu"), make("experiment=adamw_reset", "scale=paper")
    for cfg in (cpu, paper):
        assert cfg.optim.name == "adamw" and cfg.multilevel.coarse_optimizer_state == "reset"
    assert (cpu.model.n_layer, cpu.train.max_steps, cpu.multilevel.n_cycles) == (6, 600, 8)
    assert (paper.model.n_layer, paper.train.max_steps, paper.multilevel.n_cycles) == (12, 16000, 35)
    assert make("scale=cpu").coarsening.scheme == "none"
    assert make().scale == "demo" and make().train.max_steps == 1000


GPT2_VOCAB = 50257  # tiktoken's gpt2 encoding (tests/data/test_data.py reads it from the tokenizer)


def test_paper_presets_carry_the_papers_numbers():
    """Lauga et al. 2025's setting (README, docs/method.md), all from conf/scale/paper.yaml and the
    method's own defaults."""
    cfg = make("experiment=multilevel", "scale=paper")
    m = cfg.model
    assert cfg.data.tokenizer == "gpt2" and parameter_count(model_config(typed(cfg).model, GPT2_VOCAB))[0] == 22_368_512
    assert (m.n_embd, m.n_layer, m.n_head, m.block_size) == (256, 12, 8, 256)
    assert cfg.optim.name == "sgd" and cfg.schedule.name == "cosine"
    assert cfg.train.max_steps == 16000 and cfg.schedule.warmup_steps == 715
    assert cfg.optim.lr == pytest.approx(1.2e-3) and cfg.schedule.min_lr == pytest.approx(1.2e-4)
    ml = cfg.multilevel
    assert (ml.n_cycles, ml.fine_steps_per_cycle, ml.coarse_steps, ml.delta, ml.levels) == (35, 1, 100, 0.25, 2)
    assert ml.coarse_schedule.name == "constant" and ml.coarse_optim.lr == pytest.approx(1.2e-3)
    assert cfg.coarsening.scheme == "stride" and cfg.coarsening.k == 2
    assert make("experiment=schedule_control", "scale=paper").multilevel.control == "schedule"
    adamw = make("experiment=adamw_reset", "scale=paper")
    assert adamw.optim.name == "adamw" and adamw.multilevel.coarse_optimizer_state == "reset"


def test_schedule_control_matches_coarse_flops_of_gpt22m():
    cfg = OmegaConf.merge(make("experiment=schedule_control", "scale=paper"), {"model": {"vocab_size": 50257}})
    assert control_steps(cfg, 1) == 77  # 100 coarse steps x 0.769


def test_schedule_control_matches_the_coarse_flops_of_the_whole_run_not_per_phase():
    cfg = OmegaConf.merge(make("experiment=schedule_control", "scale=paper"), {"model": {"vocab_size": 50257}})
    steps = [p.steps for p in build_plan(cfg) if p.kind == "train" and p.stands_in_for]
    assert len(steps) == 35 * 2 and set(steps) <= {76, 77}
    exact = 35 * 2 * 100 * control_ratio(cfg, 1)  # 5,384.9 fine steps' worth of coarse FLOPs
    assert sum(steps) == round(exact) and abs(sum(steps) - exact) <= 0.5  # 70 x 77 would be 5,390


def test_command_line_beats_the_preset():
    cfg = make("experiment=multilevel", "scale=cpu", "coarsening=stride3", "multilevel.delta=0.5")
    assert cfg.coarsening.k == 3 and cfg.multilevel.delta == 0.5


@pytest.mark.parametrize("override,exc", [
    ("train.max_step=10", ConfigCompositionException),  # misspelt key
    ("train.max_steps=abc", ConfigCompositionException),  # wrong type
    ("model=nonexistent", ConfigCompositionException),  # unknown option
    ("coarsening=foo", ConfigCompositionException),
    ("scale=huge", ConfigCompositionException),
])
def test_hydra_rejects_typos_and_wrong_types(override, exc):
    with pytest.raises(exc):
        make(override)


PRESETS = {  # a preset of one's own whose own lines cannot compose: no override is at fault, the file is named
    "bad_value": "# @package _global_\noptim: {name: lion}\n",
    "bad_default": "# @package _global_\ndefaults: [/coarsening: nosuch]\n",
}


@pytest.mark.parametrize("overrides,line", [
    (["+train.max_steps=3"], "+train.max_steps=3: Could not append to config. An item is already at 'train.max_steps'; "
                             "Either remove + prefix: 'train.max_steps=3'"),
    (["~nothing"], "~nothing: Could not delete from config. 'nothing' does not exist"),
    (["seed=1", "seed=1.5"], "seed=1.5: value '1.5' of type 'float' could not be converted to Integer"),
    (["experiment=bad_value"], "In 'experiment/bad_value': optim.name: invalid value 'lion', expected one of [sgd, adamw]"),
    (["experiment=bad_default"], "In 'experiment/bad_default': no coarsening preset 'nosuch' (the coarsening presets: "),
])
def test_a_composition_error_is_one_line_naming_the_override_or_the_file(overrides, line, tmp_path):
    (tmp_path / "experiment").mkdir()
    for name, text in PRESETS.items():
        (tmp_path / "experiment" / f"{name}.yaml").write_text(text)
    with pytest.raises(ConfigCompositionException) as info:
        make(f"hydra.searchpath=[file://{tmp_path}]", *overrides)
    said = composition_line(info.value, overrides)
    assert said.startswith(line) and "\n" not in said, said


@pytest.mark.parametrize("override,valid", [
    ("optim.name=lion", "[sgd, adamw]"),
    ("multilevel.coarse_optim.name=lion", "[sgd, adamw]"),
    ("schedule.name=linear", "[cosine, constant]"),
    ("multilevel.coarse_schedule.name=linear", "[cosine, constant]"),
    ("multilevel.order=random", "[ascending, descending]"),
    ("multilevel.coarse_optimizer_state=drop", "[keep, reset]"),
    ("multilevel.fine_momentum_after_prolong=zero", "[keep, reset]"),
    ("multilevel.control=lr", "[none, schedule]"),
    ("coarsening.step_scale=double", "[unit, stride]"),
    ("device=tpu", "[auto, cpu, cuda]"),
    ("train.dtype=fp16", "[auto, float32, bfloat16]"),
    ("logger.name=tensorboard", "[jsonl, wandb]"),
    ("logger.mode=sometimes", "[online, offline, disabled]"),
    ("model.norm=batchnorm", "[layernorm, rmsnorm]"),
    ("model.attention=flash", "[sdpa, explicit]"),
    ("data.source=web", "[embedded, prose, text, shards]"),
    ("depth_method=dropout", f"[{', '.join(depth_method_values())}]"),
    ("stacking.operator=mirror", "[stack, interleave]"),
    ("stacking.optimizer_state=keep", "[reset, copy]"),
    ("layer_drop.profile=cubic", "[linear, uniform]"),
])
def test_a_wrong_choice_fails_at_composition_naming_the_valid_values(override, valid):
    with pytest.raises(ConfigCompositionException) as info:
        make(override)
    message = str(info.value) + str(info.value.__cause__)
    assert valid in message and override_key(override).split(".")[-1] in message


def test_choices_compare_and_print_as_their_plain_values():
    cfg = make("optim=adamw", "coarsening=evenodd")
    assert cfg.optim.name == "adamw" and f"{cfg.optim.name}" == "adamw" and str(cfg.optim.name) == "adamw"
    assert OmegaConf.to_container(cfg, enum_to_str=True)["multilevel"]["order"] == "ascending"


@pytest.mark.parametrize("overrides,needle", [
    (["coarsening=evenodd", "multilevel.delta=1.5"], "multilevel.delta=1.5 must be in [0, 1]"),
    (["coarsening=evenodd", "multilevel.delta=-0.1"], "must be in [0, 1]"),
    (["coarsening=stride3"], "model.n_layer=4 is not divisible by coarsening.k=3"),
    (["coarsening=evenodd", "multilevel.levels=4"], "more than the depth allows"),
    (["coarsening=evenodd", "coarsening.scheme=zigzag"], "coarsening.scheme='zigzag' is not one of"),
    (["coarsening=random", "coarsening.step_scale=stride"], "coarsening.step_scale=stride needs evenly spaced"),
    (["coarsening=evenodd", "multilevel.coarse_steps=0"], "multilevel.coarse_steps=0 must be > 0"),
    (["coarsening=evenodd", "multilevel.n_cycles=-1"], "multilevel.n_cycles=-1 must be > 0"),
    (["train.max_steps=0"], "train.max_steps=0 must be > 0"),
    (["coarsening=evenodd", "multilevel.n_cycles=1000"], "must be fewer than train.max_steps=1000"),
    (["seed=-1"], "seed=-1 must be in [0, 2**32)"),
    (["coarsening=random", "coarsening.seed=-3"], "coarsening.seed=-3 must be null"),
    (["coarsening=evenodd", "coarsening.redraw=true"], "apply to random schemes only"),
    (["train.batch_size=10", "train.grad_accum=3"], "divisible by train.grad_accum"),
    (["multilevel.control=schedule"], "needs a coarsening scheme"),
    (["model.n_head=5"], "divisible by model.n_head"),
    (["data=text"], "data=text needs data.path"),
])
def test_semantic_errors_have_one_clear_message(overrides, needle):
    with pytest.raises(ConfigError) as info:
        validate(typed(make(*overrides)))
    assert needle in str(info.value)
