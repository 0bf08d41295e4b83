"""The group yamls of the run config state only what differs from the schema, and a composed config is
exactly the schema with the chosen yamls' keys merged onto it, in the order of conf/config.yaml's
defaults: no value comes from anywhere else, so reading a preset's yaml and the schema tells the run.

The run config's groups are those conf/config.yaml's defaults list names (experiment/ and scale/
included); conf/study/ and conf/hydra/ are other tools' configs, each with its own schema."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import mltrain.conf
from mltrain.config import register_configs, schema as run_schema

CONF = Path(mltrain.conf.__file__).parent
ROOT = OmegaConf.load(CONF / "config.yaml")
GROUPS = [next(iter(entry)) for entry in ROOT.defaults if OmegaConf.is_dict(entry)]

# (yaml, key) that may restate the schema's default, each with why: a `_global_` preset that comes after
# a group may set a key back to the default to undo that group's value. None needs it today.
ALLOWED: dict[tuple[str, str], str] = {}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def package(path: Path) -> str:
    """The key a group yaml's content sits under: its `# @package` line (`_global_`: the root), else its group."""
    for line in path.read_text().splitlines():
        if line.startswith("# @package"):
            name = line.split()[-1]
            return "" if name == "_global_" else name
    return path.parent.name


def body(path: Path) -> dict:
    """The yaml's keys at their place in the run config, its defaults list left out."""
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    data.pop("defaults", None)
    for part in reversed([p for p in package(path).split(".") if p]):
        data = {part: data}
    return data


def leaves(node: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        out += leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
    return out


def plain(value: Any) -> Any:
    """A node's value as Python's: a list as a list, a choice as its string."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, enum_to_str=True)
    return value.value if isinstance(value, Enum) else value


def keys_at_their_default(path: Path) -> list[str]:
    """`key=value` for every key of the yaml whose value, merged onto the schema, is the schema's default
    (compared as the schema holds them: `0` for a float key is `0.0`, a choice's string its member)."""
    schema = OmegaConf.structured(run_schema())
    stated = body(path)
    merged = OmegaConf.merge(schema, stated)
    out = []
    for key in leaves(stated):
        value = OmegaConf.select(merged, key)
        if plain(value) == plain(OmegaConf.select(schema, key)):
            out.append(f"{key}={plain(value)!r}")
    return out


def test_the_run_config_has_its_groups():
    assert {"model", "data", "optim", "schedule", "coarsening", "logger", "scale", "experiment"} == set(GROUPS)


@pytest.mark.parametrize("group", GROUPS)
def test_no_group_yaml_restates_a_schema_default(group):
    found = [f"conf/{group}/{path.name}: {kv}" for path in sorted((CONF / group).glob("*.yaml"))
             for kv in keys_at_their_default(path)
             if (f"{group}/{path.name}", kv.split("=")[0]) not in ALLOWED]
    assert not found, "keys set to the schema's default (drop them):\n" + "\n".join(found)


def test_a_key_at_its_default_is_found(tmp_path):
    """The check can fail: a key at its default, as a choice's string and as an int for a float key, is named."""
    (tmp_path / "optim").mkdir()
    (tmp_path / "optim" / "mine.yaml").write_text("name: sgd\nlr: 0.5\nweight_decay: 0\n")
    assert keys_at_their_default(tmp_path / "optim" / "mine.yaml") == ["optim.name='sgd'", "optim.weight_decay=0.0"]
    (tmp_path / "mine.yaml").write_text("# @package _global_\ntrain:\n  compile: auto\n  max_steps: 5\n")
    assert keys_at_their_default(tmp_path / "mine.yaml") == ["train.compile='auto'"]


# The keys whose schema defaults are placeholders (docs/configuration.md, "Where a value comes from"):
# every scale preset sizes them, so no run takes them from the schema.
SCALE_KEYS = ["optim.lr", "schedule.warmup_steps", "schedule.min_lr", "multilevel.n_cycles",
              "multilevel.coarse_steps", "multilevel.coarse_optim.lr"]


@pytest.mark.parametrize("scale", options("scale"))
def test_every_scale_preset_sizes_the_keys_the_schema_leaves_neutral(scale):
    stated = leaves(body(CONF / "scale" / f"{scale}.yaml"))
    assert not [key for key in SCALE_KEYS if key not in stated], f"conf/scale/{scale}.yaml must set them"


# ---------------------------------------------------------------------------------------------
# A composed config is the schema with the chosen yamls merged onto it


def chain(group: str, option: str) -> list[Path]:
    """The yaml files an option stands for, in merge order: the options of its group its defaults list
    names (conf/experiment/adamw_reset.yaml: multilevel), each with its own, then the option itself."""
    path = CONF / group / f"{option}.yaml"
    parents = [entry for entry in OmegaConf.load(path).get("defaults", []) if isinstance(entry, str)]
    return [p for parent in parents for p in chain(group, parent)] + [path]


def merged_by_hand(choices: dict) -> dict:
    """The schema, then each entry of conf/config.yaml's defaults in order (`_self_`: its own keys), each
    group at the option Hydra chose for it; resolved."""
    cfg = OmegaConf.structured(run_schema())
    own = OmegaConf.to_container(ROOT, resolve=False)
    for key in ("defaults", "hydra"):
        own.pop(key)
    for entry in ROOT.defaults:
        if entry == "_self_":
            cfg = OmegaConf.merge(cfg, own)
        elif OmegaConf.is_dict(entry) and choices[next(iter(entry))] is not None:
            group = next(iter(entry))
            for path in chain(group, choices[group]):
                cfg = OmegaConf.merge(cfg, body(path))
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


# Every yaml file at least once: each method preset at a scale other than the default (so a method's
# keys come after a scale's), each scale, each option of the other groups, and no overrides.
COMBINATIONS = ([[f"experiment={e}", "scale=cpu"] for e in options("experiment")]
                + [[f"scale={s}"] for s in options("scale")]
                + [[f"{g}={o}"] for g in GROUPS if g not in ("experiment", "scale") for o in options(g)]
                + [[]])


@pytest.mark.parametrize("overrides", COMBINATIONS, ids=lambda o: " ".join(o) or "defaults")
def test_every_preset_composes_to_the_schema_merged_with_its_yamls(overrides):
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    composed = OmegaConf.to_container(cfg, enum_to_str=True)
    composed.pop("hydra")  # resolved without it: its run dir exists only in a run
    assert OmegaConf.to_container(OmegaConf.create(composed), resolve=True) == merged_by_hand(choices)
