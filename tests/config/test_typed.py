"""The composed config typed once (config.typed): the sections are their dataclasses, fixed-choice
values stay enums, a key added with `+` is refused by name, and every config written out (the W&B
config, the config digest, a checkpoint's computation config) is the tree the composed config gives."""

import pytest
from omegaconf import OmegaConf

from helpers import compose_config, typed
from mltrain.config import Config, ConfigError
from mltrain.data.config import DataConfig
from mltrain.model.gpt import GPTConfig, Norm
from mltrain.core.plain import plain
from mltrain.runs.keys import config_digest
from mltrain.training.checkpoint import computation_config
from mltrain.optim_settings import OptimConfig
from mltrain.training.settings import TrainConfig

PRESETS = [(), ("coarsening=evenodd",), ("experiment=stacking",), ("experiment=layer_drop",), ("experiment=raptr",),
           ("logger=wandb", "logger.tags=[a,b]"), ("optim=adamw", "schedule=cosine", "model.norm=rmsnorm")]


def test_the_typed_config_holds_dataclasses_and_enums():
    cfg = typed(compose_config("model.norm=rmsnorm"))
    assert isinstance(cfg, Config) and isinstance(cfg.model, GPTConfig) and isinstance(cfg.data, DataConfig)
    assert isinstance(cfg.train, TrainConfig) and isinstance(cfg.optim, OptimConfig)
    assert cfg.model.norm is Norm.rmsnorm and str(cfg.model.norm) == "rmsnorm"
    assert cfg.train.max_steps == 24  # the tests' size


def test_hydras_own_node_is_left_out():
    assert typed(compose_config(hydra=True)) == typed(compose_config())


def test_a_key_added_with_plus_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"^train\.foo is not an mltrain key"):
        typed(compose_config("+train.foo=1"))


@pytest.mark.parametrize("overrides", PRESETS, ids=lambda o: " ".join(o) or "default")
def test_the_config_written_out_is_the_composed_tree(overrides):
    composed = compose_config(*overrides)
    tree = OmegaConf.to_container(composed, resolve=True, enum_to_str=True)
    cfg = typed(composed)
    assert plain(cfg) == tree  # what W&B gets (with the provenance added), and what run.json's digest is of
    assert config_digest(plain(cfg)) == config_digest(tree)
    flat = computation_config(cfg)
    assert flat["optim.lr"] == tree["optim"]["lr"] and "logger.name" not in flat  # bookkeeping keys left out
