"""A study composes one config per sweep and sets each other setting's swept values on a copy: the
configs must equal what Hydra composes for each setting, and anything but a plain value is composed."""
from omegaconf import OmegaConf

from mltrain.tools.study.compose import Composer, with_values


def test_a_settings_values_set_on_a_composed_config_equal_hydras_own_composition():
    base = ["scale=smoke", "experiment=multilevel", "optim.lr=0.1", "seed=0"]
    with Composer() as composer:
        first = composer.compose(base, "test")
        values = [("optim.lr", "0.3"), ("train.budget", "2.0"), ("seed", "7"), ("multilevel.delta", "0.5")]
        fast = with_values(first, values)
        full = composer.compose([*base, *(f"{k}={v}" for k, v in values)], "test")
    assert fast is not None and OmegaConf.to_container(fast) == OmegaConf.to_container(full)
    assert OmegaConf.select(first, "optim.lr") == 0.1  # the first config is left as it was


def test_a_group_an_addition_or_an_unknown_key_is_left_to_hydra():
    with Composer() as composer:
        first = composer.compose(["scale=smoke"], "test")
    assert with_values(first, [("optim", "adamw")]) is None
    assert with_values(first, [("+train.extra", "1")]) is None
    assert with_values(first, [("train.no_such_key", "1")]) is None
    assert with_values(first, [("model", "tiny")]) is None
