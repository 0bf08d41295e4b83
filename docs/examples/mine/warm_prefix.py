"""A rival depth method of our own, with keys of its own, from this one file (a plugin): `warm_prefix`
trains the first `warm_prefix.blocks` blocks alone for `warm_prefix.fraction` of the run, then the whole
model. `mltrain plugins=[warm_prefix] ...` imports it from the current folder before the config is
composed: `depth_method=warm_prefix` and the keys `warm_prefix.*` then exist (docs/contributing.md)."""

from dataclasses import dataclass

from mltrain.core.errors import ConfigError
from mltrain.method.paths import Stage
from mltrain.method.registry import register_method
from mltrain.method.rivals import Rival
from mltrain.method.stacking import Prefix


@dataclass
class WarmPrefixConfig:
    """The `warm_prefix` section of the run's config."""

    blocks: int = 1  # the prefix trained alone first
    fraction: float = 0.5  # of the run's fine steps


@register_method
class WarmPrefix(Rival):
    """Two stages of fine steps: the prefix's blocks alone, then every block."""

    name = "warm_prefix"  # depth_method=warm_prefix, the run kind its runs record, the section's name
    Config = WarmPrefixConfig

    def check_keys(self, total_steps):
        c, n_layer = self.cfg.warm_prefix, self.cfg.model.n_layer
        if not 1 <= c.blocks < n_layer:
            raise ConfigError(f"warm_prefix.blocks={c.blocks} must be in [1, model.n_layer={n_layer})")
        if not 0 < c.fraction < 1 or not 1 <= int(c.fraction * total_steps) < total_steps:
            raise ConfigError(f"warm_prefix.fraction={c.fraction} must leave both stages a step of the {total_steps}")

    def stages(self, total_steps):
        c = self.cfg.warm_prefix
        first = int(c.fraction * total_steps)
        return [Stage(first, Prefix(c.blocks)), Stage(total_steps - first)]
