"""Keys and values the schema refuses: a key outside it (with or without +), and every number that is not
finite or does not fit in 64 bits, each named, before anything is written or built."""

from __future__ import annotations

import re
import typing

import pytest
from helpers import SMOKE, compose_config, one_error, run_tool_here, typed

from mltrain.config import Config, validate
from mltrain.core.errors import ConfigError


@pytest.mark.parametrize("override,named,suggested", [
    ("+train.max_step=3", "train.max_step", "train.max_steps"),
    ("++train.max_step=3", "train.max_step", "train.max_steps"),
    ("+foo=1", "foo", None),
    ("+model.n_layers=2", "model.n_layers", "model.n_layer"),
    ("+multilevel.coarse_optim.lr_min=0.1", "multilevel.coarse_optim.lr_min", None),
    ("+data.paths=x.txt", "data.paths", "data.path"),
])
def test_a_key_outside_the_schema_is_refused_with_or_without_plus(override, named, suggested):
    with pytest.raises(ConfigError) as err:
        validate(typed(compose_config(override)))
    msg = str(err.value)
    assert msg.startswith(f"{named} is not an mltrain key")
    if suggested:
        assert f"did you mean {suggested}?" in msg


def test_a_key_outside_the_schema_stops_the_cli_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    line = one_error(run_tool_here("mltrain", *SMOKE, "+train.max_step=3", f"hydra.run.dir={out}", cwd=tmp_path))
    assert "train.max_step is not an mltrain key (did you mean train.max_steps?" in line
    assert not out.exists()


def _numeric_keys(schema: type = Config, prefix: str = "") -> list[tuple[str, type]]:
    """Every float and int key of the schema, dotted, with its number type."""
    import dataclasses

    keys = []
    for name, hint in typing.get_type_hints(schema).items():
        if typing.get_origin(hint) is list:  # optim.betas: checked element by element (test_ranges_name_the_key)
            continue
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        sub = next((a for a in args if dataclasses.is_dataclass(a)), None)
        if sub is not None:
            keys += _numeric_keys(sub, f"{prefix}{name}.")
        elif args[0] in (float, int):
            keys.append((f"{prefix}{name}", args[0]))
    return keys


NUMERIC_KEYS = _numeric_keys()


def test_the_schema_has_numeric_keys_to_check():
    names = dict(NUMERIC_KEYS)
    assert {"optim.lr", "optim.eps", "train.grad_clip", "multilevel.coarse_optim.lr", "seed"} <= names.keys()


@pytest.mark.parametrize("key", [k for k, t in NUMERIC_KEYS if t is float])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_key_must_be_finite_and_is_named(key, value):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}={value}"):
        validate(typed(compose_config("coarsening=evenodd", f"{key}={value}")))


@pytest.mark.parametrize("key", [k for k, t in NUMERIC_KEYS if t is int])
def test_every_int_key_must_fit_in_64_bits_and_is_named(key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=\d+ is out of range"):
        validate(typed(compose_config("coarsening=evenodd", f"{key}={2**64}")))


@pytest.mark.parametrize("overrides,named", [
    (["optim=adamw", "optim.eps=0"], "optim.eps=0.0 must be > 0"),
    (["optim=adamw", "optim.eps=-1e-8"], "optim.eps=-1e-08 must be > 0"),
    (["coarsening=evenodd", "multilevel.coarse_optim.eps=0"], "multilevel.coarse_optim.eps=0.0 must be > 0"),
    (["optim.betas=[0.9,nan]"], "optim.betas=[0.9, nan]"),
    (["model.vocab_size=0"], "model.vocab_size=0 must be > 0"),
    (["optim.lr=0"], "optim.lr=0.0 must be > 0"),
    (["train.grad_clip=-1"], "train.grad_clip=-1.0 must be >= 0"),
])
def test_ranges_name_the_key(overrides, named):
    with pytest.raises(ConfigError) as err:
        validate(typed(compose_config(*overrides)))
    assert str(err.value).startswith(named)


def test_a_nan_value_stops_the_cli_with_its_key_before_anything_is_built(tmp_path):
    out = tmp_path / "out"
    line = one_error(run_tool_here("mltrain", *SMOKE, "optim=adamw", "optim.eps=nan", f"hydra.run.dir={out}", cwd=tmp_path))
    assert line == "mltrain: error: optim.eps=nan must be a finite number"
    assert not out.exists()
