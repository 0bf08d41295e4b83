"""Typed configuration: the schema every YAML file in `conf/` is merged onto.

Each section's dataclass lives beside what it configures: `model` in mltrain/model/settings.py
(GPTConfig, beside mltrain/model/gpt.py), `data` in mltrain/data/config.py, `train` in
mltrain/training/settings.py, `optim` and `schedule` (and the coarse levels' optimizer) in
mltrain/optim_settings.py, `logger` in mltrain/runs/tracking.py, `coarsening` in
mltrain/method/coarsening.py and `multilevel` in mltrain/method/multilevel.py. This module composes them
into `Config` (the sections every run has) and checks them (`validate()`). A depth method with keys of
its own declares their dataclass as its `Config` (mltrain/method/registry.py; stacking.py, layer_drop.py,
raptr.py): `schema()` adds it under the method's name, so a method registered from a plugin of the
user's own (`plugins=[my_method]`, mltrain/method/plugins.py) brings its keys without an edit here.
None of them, and nothing this module imports, loads torch: a config is composed, checked and refused
without it.

The schema is registered in Hydra's ConfigStore as `mltrain_schema`; `conf/config.yaml` lists it
first in its defaults, so a misspelt key (`train.max_step=...`) or a wrong type (`train.max_steps=abc`)
fails at start-up with Hydra's own message, before any data is read or any model is built.

`typed()` turns the composed config into a `Config` instance (of the schema class, a subclass of
`Config`) once, where Hydra hands it over (the CLI's task and run-dir guard, a sweep's check of its
jobs): code below the CLI takes that typed object and its sections, never the DictConfig. Checks that
need more than a type (δ in [0, 1], the depth divisible by the coarsening, batch size divisible by
gradient accumulation, ...) live in `validate()`, which `run` calls before any compute.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import time
import typing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mltrain.core.checks import check_optim, check_schedule, positive
from mltrain.core.choice import Choice
from mltrain.data.config import DataConfig, Source
from mltrain.core.errors import RETIRED_KEYS, ConfigError, first_line
from mltrain.method import plugins
from mltrain.method.coarsening import CoarseningConfig, scheme_class
from mltrain.method.multilevel import Control, MultilevelConfig
from mltrain.method.plan import budget_steps
from mltrain.method.registry import NONE, depth_method_values, method_for, method_sections
from mltrain.model.settings import GPTConfig
from mltrain.optim_settings import OptimConfig, ScheduleConfig
from mltrain.runs.keys import is_bookkeeping
from mltrain.runs.names import short_dirname
from mltrain.runs.rundir import unique_dir
from mltrain.training.world import START_TIME_ENV
from mltrain.runs.tracking import LoggerConfig
from mltrain.training.settings import TrainConfig, compile_setting

ModelConfig = GPTConfig  # one class: the schema's `model` node is the model's own config

__all__ = ["Config", "ConfigError", "DataConfig", "ModelConfig", "register_configs", "schema", "typed", "validate",
           "validate_composed"]


class Device(Choice):
    auto = "auto"  # cuda when torch sees a GPU, else cpu
    cpu = "cpu"
    cuda = "cuda"


@dataclass
class Config:
    """The sections every run has. The schema Hydra composes onto is `schema()`: this class with
    `depth_method` taking the registered methods' names and each method's own section."""

    seed: int = 0
    device: Device = Device.auto
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    coarsening: CoarseningConfig = field(default_factory=CoarseningConfig)
    multilevel: MultilevelConfig = field(default_factory=MultilevelConfig)
    # A rival depth method instead of single-level or multilevel training (experiment=stacking,
    # layer_drop, raptr set it): `none` or a registered method's name (MethodName in the schema).
    depth_method: str = NONE
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    preset: Optional[str] = None  # name of the method preset, set by conf/experiment/*.yaml
    scale: Optional[str] = None  # name of the scale preset, set by conf/scale/*.yaml
    # Modules of the user's own imported before the schema is built (mltrain/method/plugins.py): read
    # from the command line and MLTRAIN_PLUGINS, recorded here.
    plugins: List[str] = field(default_factory=list)


def _method_name_choice() -> type[Choice]:
    """`none` and the name of every registered depth method chosen by its name (mltrain/method/registry.py)."""
    # Enum's functional API (EnumMeta.__call__); mypy reads a call of a `str` Enum as str's constructor.
    functional = typing.cast("typing.Callable[..., type[Choice]]", Choice)
    made = functional("MethodName", {name: name for name in depth_method_values()})
    made.__reduce_ex__ = lambda self, proto: (_method_name, (self.value,))  # type: ignore[method-assign]
    return made


def _method_name(value: str) -> Choice:
    """A `depth_method` value unpickled: in a sweep's worker process (hydra/launcher=local), which gets its
    job's composed config pickled, the plugins of MLTRAIN_PLUGINS imported first (their methods' names)."""
    plugins.load(plugins.from_env())
    schema()
    return MethodName(value)


def _make_schema() -> type[Config]:
    sections = method_sections()
    common = {f.name for f in dataclasses.fields(Config)}
    for name in sections:
        if name in common:
            raise TypeError(f"the depth method {name!r} declares a Config, but {name} is a common section of "
                            "the config: rename the method")
    own = [(name, section, field(default_factory=section)) for name, section in sections.items()]
    made = dataclasses.make_dataclass("Schema", [("depth_method", MethodName, field(default=NONE)), *own],
                                      bases=(Config,))
    made.__module__, made.__qualname__ = __name__, "Schema"  # pickled by name (a sweep's worker finds it)
    made.__doc__ = "The schema for the depth methods registered when it was made (config.schema())."
    return made


# The values of `depth_method` (Hydra refuses any other while composing) and the schema, for the depth
# methods registered: schema() makes them again when a method was registered since.
def _registered() -> tuple:
    return tuple(depth_method_values()), tuple(method_sections().items())


MethodName = _method_name_choice()
Schema = _make_schema()
_SCHEMA_FOR = _registered()


def schema() -> type[Config]:
    """The schema class: `Config`, `depth_method` one of the registered methods' names (MethodName), and
    each registered method's own section (its `Config`) under its name. Made again, and the module
    attributes `MethodName` and `Schema` rebound, when the registered methods changed since."""
    global MethodName, Schema, _SCHEMA_FOR
    key = _registered()
    if key != _SCHEMA_FOR:
        MethodName = _method_name_choice()
        Schema = _make_schema()
        _SCHEMA_FOR = key
    return Schema


_PROCESS_START = time.time()


def start_time(pattern: str) -> str:
    """`${mltrain_now:%H-%M-%S}` in conf/config.yaml: Hydra's `now`, but one instant for all ranks."""
    return datetime.fromtimestamp(float(os.environ.get(START_TIME_ENV, _PROCESS_START))).strftime(pattern)


def resuming(train_resume: bool) -> bool:
    """Whether a run resumes: train.resume=true, or a job SLURM has started again (it counts restarts in
    SLURM_RESTART_COUNT: a preempted or timed-out job it requeued), which thus continues by itself."""
    return bool(train_resume) or int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0


def hydra_subdir(output_dir: str, resume: bool) -> Optional[str]:
    """Hydra's `output_subdir` for a job writing to `output_dir` (conf/config.yaml): `.hydra`, or None
    when resuming a dir that already has `.hydra/config.yaml`. Hydra writes those files before the task
    starts; None turns the writes off, so a resumed (or skipped, finished) run keeps the config it was
    made with, which the resume compares against."""
    if resuming(resume) and (Path(output_dir) / ".hydra" / "config.yaml").exists():
        return None
    return ".hydra"


_STORED_FOR: Any = None  # the schema class stored in the ConfigStore


def register_configs() -> None:
    """The schema, and the resolvers the config tree uses; idempotent. The schema is the one for the
    depth methods registered when it is called (schema(): made again if one was registered since)."""
    global _STORED_FOR
    made = schema()
    store = ConfigStore.instance()
    # Storing converts the schema (OmegaConf.structured, ~30 ms): once per set of depth methods, not per call.
    if _STORED_FOR is not made or "mltrain_schema.yaml" not in store.repo:
        store.store(name="mltrain_schema", node=made)
        _STORED_FOR = made
    OmegaConf.register_new_resolver("mltrain_dirname", short_dirname, replace=True)
    # Default run/sweep dirs: claimed with an atomic mkdir, suffixed when another run took the name in
    # the same second. Cached like Hydra's `now`, so every job of a sweep resolves the same folder.
    OmegaConf.register_new_resolver("mltrain_unique_dir", unique_dir, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("mltrain_now", start_time, replace=True)
    OmegaConf.register_new_resolver("mltrain_hydra_subdir", hydra_subdir, replace=True)
    OmegaConf.register_new_resolver("mltrain_bookkeeping_keys", bookkeeping_override_keys, replace=True)


def bookkeeping_override_keys() -> list[str]:
    """`hydra.job.config.override_dirname.exclude_keys` (conf/config.yaml): runs/keys.py's
    BOOKKEEPING_KEYS with every key below them spelled out (Hydra compares whole keys), so a sweep
    job's directory name leaves out exactly what the label and the resume check leave out."""
    return [key for key in _schema_keys(schema()) if is_bookkeeping(key)]


def _schema_keys(schema: type, prefix: str = "") -> list[str]:
    """Every key of the dataclass `schema`, nested keys included (`train`, `train.max_steps`, ...)."""
    keys = []
    for name, hint in typing.get_type_hints(schema).items():
        keys.append(prefix + name)
        sub = _schema_class(hint)
        if sub is not None:
            keys += _schema_keys(sub, f"{prefix}{name}.")
    return keys


# ---------------------------------------------------------------------------------------------
# Semantic validation (types are Hydra's job; this is everything a type cannot say)


# Keys of the composed config that are not mltrain's: Hydra's own node (present in callbacks).
_NOT_OURS = ("hydra",)
INT64_MAX = 2**63 - 1


def _schema_class(hint: Any) -> Optional[type]:
    """The dataclass a field's type names (Optional[X] -> X), or None for a leaf."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _numbers(hint: Any) -> tuple[type, ...]:
    """float and/or int when a field holds numbers (plain, Optional or a List of them)."""
    args = typing.get_args(hint)
    inner = [a for a in (args or (hint,)) if a is not type(None)]
    if typing.get_origin(hint) in (list, List):
        inner = list(args)
    return tuple(t for t in inner if t in (float, int))


def _entries(node: Any) -> list[tuple[str, Any]]:
    """(key, value) of a config node: a composed DictConfig's keys as given, a typed section's fields."""
    if dataclasses.is_dataclass(node):
        return [(f.name, getattr(node, f.name)) for f in dataclasses.fields(node)]
    return [(key, node[key]) for key in node.keys()]


def _check_tree(node: DictConfig | Config, schema: type, prefix: str = "") -> Iterator[str]:
    """Every problem of `node` (composed or typed) against its schema class, as a message: keys the
    schema does not have (Hydra adds them with `+key=...` even to a typed config, and nothing would read
    them) and numbers that are not finite or do not fit in 64 bits."""
    hints = typing.get_type_hints(schema)
    for key, value in _entries(node):
        name = f"{prefix}{key}"
        if not prefix and key in _NOT_OURS:
            continue
        if key not in hints and name in RETIRED_KEYS:
            yield RETIRED_KEYS[name]
            continue
        if key not in hints:
            close = difflib.get_close_matches(str(key), list(hints), n=1)
            hint = (f"did you mean {prefix}{close[0]}?" if close
                    else f"the keys of {prefix.rstrip('.') or 'the config'} are {', '.join(hints)}")
            yield f"{name} is not an mltrain key ({hint}); a key added with + would be ignored, so it is refused"
            continue
        sub = _schema_class(hints[key])
        if sub is not None and (OmegaConf.is_dict(value) or dataclasses.is_dataclass(value)):
            yield from _check_tree(value, sub, f"{name}.")
            continue
        if not _numbers(hints[key]) or value is None:
            continue
        for v in value if OmegaConf.is_list(value) or isinstance(value, list) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                yield f"{name}={value} must be a finite number"
            elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT64_MAX:
                yield f"{name}={value} is out of range (it must fit in 64 bits)"


def typed(cfg: DictConfig) -> Config:
    """The composed config as a `Config` instance, made once where Hydra hands the config over: the
    keys checked first (a key added with `+` has no field to go to, so it is refused by name), then
    OmegaConf.to_object (interpolations resolved, fixed-choice values kept as their Choice enums).
    Hydra's own node, present in its callbacks, is left out, and a config composed onto another schema (a
    method registered since) is made again on this one. ConfigError in one line."""
    made = schema()
    problem = next(_check_tree(cfg, made), None)
    if problem is not None:
        raise ConfigError(problem)
    composed: DictConfig | ListConfig = cfg
    if "hydra" in cfg or OmegaConf.get_type(cfg) is not made:
        ours = [str(k) for k in cfg if k != "hydra"]
        composed = OmegaConf.merge(OmegaConf.structured(made), OmegaConf.masked_copy(cfg, ours))
    try:
        # a structured config of `made` (a Config) becomes an instance of it
        return typing.cast(Config, OmegaConf.to_object(composed))
    except OmegaConfBaseException as err:  # an interpolation that does not resolve (${oc.env:...})
        raise ConfigError(first_line(err)) from None


def validate_composed(cfg: DictConfig) -> Config:
    """The composed `cfg` typed and validated (ConfigError for its first problem): how a sweep checks
    each of its jobs before any starts."""
    config = typed(cfg)
    validate(config)
    return config


def validate(cfg: Config) -> None:
    """Raise ConfigError with one clear message for the first problem found in the typed `cfg`. Touches no data.

    Keys with a fixed set of values are Choice enums, refused by Hydra while composing; this checks
    what a type cannot say: first that every key is the schema's and every number finite (so
    `optim.lr=nan` is named as itself, not as a later comparison that happens to fail), then each
    key's range."""
    problem = next(_check_tree(cfg, schema()), None)
    if problem is not None:
        raise ConfigError(problem)
    _check_plugins(cfg.plugins)
    m, t = cfg.model, cfg.train
    if not 0 <= cfg.seed < 2**32:
        raise ConfigError(f"seed={cfg.seed} must be in [0, 2**32)")
    for key in ("n_layer", "n_head", "n_embd", "block_size"):
        positive(getattr(m, key), f"model.{key}")
    if m.n_embd % m.n_head:
        raise ConfigError(f"model.n_embd={m.n_embd} must be divisible by model.n_head={m.n_head}")
    if not 0.0 <= m.dropout < 1.0:
        raise ConfigError(f"model.dropout={m.dropout} must be in [0, 1)")
    if m.vocab_size is not None:
        positive(m.vocab_size, "model.vocab_size")
    positive(m.pad_vocab_to, "model.pad_vocab_to")
    if m.loss_chunk < 0:
        raise ConfigError(f"model.loss_chunk={m.loss_chunk} must be 0 (the whole batch at once) or a number of rows")
    if cfg.data.source == Source.text and not cfg.data.path:
        raise ConfigError("data=text needs data.path (a file, a directory or a glob of text files)")
    if cfg.data.source == Source.shards and not cfg.data.dir:
        raise ConfigError("data=shards needs data.dir (a folder of .bin token shards)")
    if not 0.0 < cfg.data.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction={cfg.data.val_fraction} must be in (0, 1)")
    for key in ("max_steps", "batch_size", "grad_accum", "eval_interval", "eval_tokens", "log_interval"):
        positive(getattr(t, key), f"train.{key}")
    if t.eval_batch_size is not None:
        positive(t.eval_batch_size, "train.eval_batch_size")
    positive(t.grad_clip, "train.grad_clip", zero_ok=True)
    if not 0.0 < t.budget <= 10.0 or math.isnan(t.budget):
        raise ConfigError(f"train.budget={t.budget} must be in (0, 10] (a fraction of train.max_steps)")
    positive(t.checkpoint_interval, "train.checkpoint_interval", zero_ok=True)
    positive(t.keep_checkpoints, "train.keep_checkpoints")
    compile_setting(t.compile)  # auto, true or false
    positive(t.stop_check_interval, "train.stop_check_interval")
    if t.peak_flops is not None:
        positive(t.peak_flops, "train.peak_flops")
    if t.batch_size % t.grad_accum:
        raise ConfigError(
            f"train.batch_size={t.batch_size} must be divisible by train.grad_accum={t.grad_accum}"
        )
    check_optim(cfg.optim, "optim")
    check_schedule(cfg.schedule, "schedule", cfg.optim.lr)
    _validate_coarsening(cfg)
    # The depth method checks its own keys (multilevel: the cycles, the coarse optimizer, the scheme's
    # keys; a rival: its section) and that it fits in the run's fine steps.
    method_for(cfg).check_config(budget_steps(t))


def _check_plugins(names: List[str]) -> None:
    """A plugin named in the config but not imported: set in a config file, read after the schema was built."""
    late = [name for name in names if name not in plugins.loaded()]
    if late:
        raise ConfigError(f"plugins={names}: {late[0]} was not imported: plugins are imported before the config "
                          f"files are read, from the command line (plugins=[{late[0]}]) or {plugins.PLUGINS_ENV}")


def _validate_coarsening(cfg: Config) -> None:
    c = cfg.coarsening
    scheme = scheme_class(c.scheme)  # ConfigError naming the registered schemes
    if c.seed is not None and not 0 <= c.seed < 2**32:
        raise ConfigError(f"coarsening.seed={c.seed} must be null or in [0, 2**32)")
    if not scheme.coarsens and cfg.multilevel.control != Control.none:
        raise ConfigError(
            "multilevel.control=schedule needs a coarsening scheme (it matches that scheme's "
            "coarse FLOPs), e.g. coarsening=evenodd"
        )
