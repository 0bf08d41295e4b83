"""The depth methods: one registered class per way of training the fine model's depth.

A method is a `DepthMethod` subclass registered with `@register_method`. It says everything the rest of
mltrain asks about it, in one place:

    name       the run kind its runs record (summary.json's `run_kind`; method/kinds.py RunKind lists the
               registered names, in registration order)
    Config     the dataclass of its own keys, if it has any: composed into the run's config as the
               section named after the method (`<name>.<key>=...`; mltrain/config.py schema())
    sections   the config sections it reads beyond the common ones (a run's label leaves out the
               sections of the other methods: runs/keys.py METHOD_KEYS); its own `Config`'s section is added
    chosen     when a config selects it: by default `depth_method=<name>`; single-level and multilevel
               training (and its controls) are chosen by `coarsening=` and `multilevel.control=` under
               `depth_method=none` and set `by_name = False`
    check_config(total_steps)   ConfigError (one line) for a config it cannot run
    plan(total_steps)           its phases (method/plan.py Phase), for `total_steps` fine steps: each
                                one says which model trains, with which optimizer, LR and batches,
                                which row columns it adds and what happens after it
    summary_fields(state, fine_step_flops)   what its runs add to summary.json
    identity()                  the settings a checkpoint names as its scheme (training/checkpoint.py)
    build(kit)                  its run's objects beyond the fine model (training/parts.py Parts): by
                                default the class its `parts` names ("module:Class"), if any
    batch_sizes()               the batch sizes of the streams its parts add, by config key

A new method is one class:

    @register_method
    class Reversed(Rival):                # method/rivals.py: a plan of fine train phases over sub-paths
        name = "reversed"
        def stages(self, total_steps): ...

and is then chosen with `depth_method=reversed` (the schema's `depth_method` values come from this
registry when mltrain/config.py register_configs() runs). A method with keys of its own declares their
dataclass as its `Config` (stacking.py: `Config = StackingConfig`), which the schema composes under the
method's name (`stacking.factor=4`): no other file names it. The built-in methods are registered when
`mltrain.method` is imported; a method of the user's own, from a module named by `plugins=[...]` on the
command line (method/plugins.py), before the schema is built. Torch-free: the tools that read run files
list the run kinds from here.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar, Optional

from mltrain.core.errors import ConfigError
from mltrain.method.settings import RunSettings

NONE = "none"  # depth_method=none: single-level or multilevel training, chosen by the coarsening scheme


class DepthMethod:
    """A depth method for the run settings `cfg` (see the module docstring). A method that reads a
    section of its own narrows `cfg` to its module's Protocol (multilevel.py `MultilevelRun`, ...)."""

    name: ClassVar[str]
    Config: ClassVar[Optional[type]] = None  # the dataclass of its own section, `<name>.<key>=...`
    sections: ClassVar[tuple[str, ...]] = ()
    by_name: ClassVar[bool] = True  # chosen with depth_method=<name>
    cfg: RunSettings

    def __init__(self, cfg: RunSettings):
        self.cfg = cfg

    @classmethod
    def chosen(cls, cfg: RunSettings) -> bool:
        """Whether `cfg` selects this method."""
        return cls.by_name and str(cfg.depth_method) == cls.name

    def check_config(self, total_steps: int) -> None:
        """ConfigError with one clear line unless this method can run `total_steps` fine steps of `cfg`."""

    def plan(self, total_steps: int) -> list[Any]:
        """The run's phases (method/plan.py Phase, which builds on this module): `total_steps` fine steps
        in all (train.max_steps x train.budget)."""
        raise NotImplementedError

    def batch_sizes(self) -> dict[str, int]:
        """The batch sizes of the method's own batch streams, by config key (each must divide among the
        ranks and micro-batches, and the largest must fit in memory, as train.batch_size must)."""
        return {}

    parts: ClassVar[Optional[str]] = None  # "module:Class" its build hook makes (None: the fine model alone)

    def build(self, kit: Any) -> Any:
        """The build hook: the objects this method's run has beyond the fine model, its optimizer and the
        fine batch stream (training/parts.py `Parts`: views of its own, batch streams, handlers of its own
        kinds of phase), made from `kit` (training/parts.py `BuildKit`); None: none. By default the
        class `parts` names, imported by name (this layer imports no torch) and called as
        `cls(method, kit)`."""
        if self.parts is None:
            return None
        module, _, name = self.parts.partition(":")
        return getattr(importlib.import_module(module), name)(self, kit)

    def summary_fields(self, state: Any, fine_step_flops: float) -> dict[str, Any]:
        """The fields a run of this method adds to summary.json, from its counters at the end (`state`:
        training/trainer.py TrainState, its steps and FLOPs by step kind). By default the setting every
        run has that says which scheme, if any, coarsened it (`coarsening`: `none` but for multilevel runs)."""
        return {"coarsening": self.cfg.coarsening.name}

    def identity(self) -> dict[str, Any]:
        """The settings a checkpoint records as its scheme, besides the run kind: a checkpoint whose scheme
        differs is refused as another scheme's (the config digest covers every value as well). None by
        default."""
        return {}


_METHODS: dict[str, type[DepthMethod]] = {}


def register_method(cls: type[DepthMethod]) -> type[DepthMethod]:
    """Class decorator: make `cls` a depth method (a run kind, and `depth_method=<cls.name>` if by_name)."""
    name = getattr(cls, "name", None)
    if not name or name == NONE or hasattr(str, name):
        raise TypeError(f"{cls.__name__} needs a `name` (not {NONE!r}, not a str attribute) to be registered as a "
                        f"depth method")
    own = cls.__dict__.get("Config")
    if own is not None:
        if not dataclasses.is_dataclass(own):
            raise TypeError(f"{cls.__name__}.Config must be a dataclass (the keys of its `{name}` section)")
        if name not in cls.sections:
            cls.sections = (*cls.sections, name)
    _METHODS[name] = cls
    return cls


def method_names() -> list[str]:
    """The registered methods' names (the run kinds), in registration order."""
    return list(_METHODS)


def method_class(name: str) -> type[DepthMethod]:
    """The method registered as `name`; KeyError for another name."""
    return _METHODS[str(name)]


def method_sections() -> dict[str, type]:
    """The config sections the registered methods declare (`Config`), by name, in registration order:
    what mltrain/config.py composes into the schema beside the common sections."""
    return {name: cls.__dict__["Config"] for name, cls in _METHODS.items() if cls.__dict__.get("Config") is not None}


def depth_method_values() -> list[str]:
    """The values `depth_method=` takes: `none`, then each method chosen by its name."""
    return [NONE, *(name for name, cls in _METHODS.items() if cls.by_name)]


def method_for(cfg: RunSettings) -> DepthMethod:
    """The method `cfg` selects; ConfigError naming the valid values for an unknown `depth_method`."""
    asked = str(cfg.depth_method)
    if asked not in depth_method_values():
        raise ConfigError(f"depth_method={asked!r} is not one of {', '.join(depth_method_values())} "
                          "(the registered depth methods)")
    for cls in _METHODS.values():
        if cls.chosen(cfg):
            return cls(cfg)
    raise ConfigError(f"no registered depth method runs depth_method={asked} with coarsening={cfg.coarsening.name}")
