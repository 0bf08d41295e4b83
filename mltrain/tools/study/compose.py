"""Every run's config, composed and checked before the first run starts.

* `Composer`: mltrain's own config tree (conf/config.yaml) composed with Hydra's compose API, the
  overrides a run's `mltrain -m` line gives it. A preset or key that does not exist, a wrong type:
  Hydra's message, as one line naming the scale and arm.
* `ladder_sizes`: each scale's parameter count (the model built on PyTorch's meta device: no memory)
  and its train.max_steps = tokens_per_param x parameters / (batch x context).
* `check_settings`: each arm's every setting at every scale, composed and run through
  `mltrain.config.validate` (ranges, a depth the coarsening cannot divide, ...). Seeds change nothing
  a check looks at, so one seed per setting is composed.
* `check_earlier_runs`: a folder of the study that holds a run made with other settings (the study's
  config changed since) is refused, naming the keys, rather than counted as done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, cast

from omegaconf import DictConfig, OmegaConf

from mltrain.core.errors import ConfigError, MltrainError
from mltrain.tools.study.axes import AXES, FOLLOWS_FROM_AXIS
from mltrain.tools.study.plan import SEED, Run, Sweep, arm_overrides
from mltrain.tools.study.schema import StudyConfig

if TYPE_CHECKING:  # the training stack is imported when a run config is made, not with this module
    from mltrain.config import Config


# Lines of Hydra's and OmegaConf's messages that say nothing about the problem itself.
_NOISE = re.compile(r"^(See https?://|reference_type=|object_type=|To append to your config use|Set the environment "
                    r"variable HYDRA_FULL_ERROR)")


def one_line(err: BaseException) -> str:
    """An error of Hydra, OmegaConf or YAML in one line that names what is wrong: every line of its
    message and its cause's that says something (`Could not override 'seed'` + `Key 'seed' not in
    'StudyConfig'`; `ConfigKeyError raised while composing config` + `Key 'gird' not in 'ArmConfig'` +
    the full key; a YAML error + the file, line and column), Hydra's advice and type names left out."""
    parts: list[str] = []
    for e in (err, err.__cause__, err.__context__ if err.__cause__ is None else None):
        if e is None:
            continue
        for line in str(e).strip().splitlines():
            line = line.strip().rstrip(".:")
            if line.startswith(("Available options", "Config search path")):
                break
            if not line or _NOISE.match(line):
                continue
            if line.startswith("full_key:"):
                line = f"key {line.split(':', 1)[1].strip()}"
            if line not in parts:
                parts.append(line)
    return ": ".join(parts) if parts else type(err).__name__


class Composer:
    """Composes mltrain run configs in this process (one Hydra initialisation for all of them)."""

    def __init__(self) -> None:
        from hydra import initialize_config_module

        from mltrain.config import register_configs

        register_configs()
        self._context = initialize_config_module(config_module="mltrain.conf", version_base="1.3")

    def __enter__(self) -> "Composer":
        self._context.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._context.__exit__(*exc)

    def compose(self, overrides: list[str], where: str) -> Any:
        """The config `mltrain <overrides>` runs with; ConfigError naming `where` when it cannot exist."""
        from hydra import compose

        try:
            return compose("config", overrides=list(overrides))
        except Exception as err:  # noqa: BLE001 - Hydra's composition errors: a missing preset, a typo
            raise ConfigError(f"{where}: {one_line(err)}") from None


@dataclass
class ScaleSize:
    n_params: int
    max_steps: int
    tokens_per_step: int  # train.batch_size x model.block_size
    tags: tuple[str, ...] = ()  # logger.tags the runs have already (the study adds its name)
    n_layer: int = 0  # model.n_layer and model.n_embd of the composed config (the depth and width axes)
    n_embd: int = 0

    @property
    def tokens_per_param(self) -> float:
        return self.max_steps * self.tokens_per_step / self.n_params

    def on_axis(self, axis: str) -> float:
        """This rung's value on a ladder axis (one of axes.AXES), read from its composed config."""
        return float(AXES[axis].value(self))


def parameter_count(cfg: Config) -> int:
    """Parameters of the model the typed run config `cfg` describes, its vocabulary from the tokenizer
    (nothing allocated)."""
    from mltrain.data.tokenizers import get_tokenizer
    from mltrain.model.memory import parameter_count as count
    from mltrain.model.settings import model_config

    return count(model_config(cfg.model, get_tokenizer(cfg.data.tokenizer).n_vocab))[0]


def steps_for(tokens_per_param: float, n_params: int, tokens_per_step: int) -> int:
    """train.max_steps that give `tokens_per_param` tokens per parameter (at least 1)."""
    return max(1, round(tokens_per_param * n_params / tokens_per_step))


def ladder_sizes(study: StudyConfig, composer: Composer) -> dict[str, ScaleSize]:
    """Each scale's size and steps, from the common settings and the scale's overrides; ConfigError when
    the rungs do not vary the study's ladder_axis alone (see check_rungs)."""
    from mltrain.config import typed

    sizes, configs = {}, {}
    for name, scale in study.ladder.items():
        where = f"scale {name}"
        cfg = composer.compose([*study.common, *study.extra, *scale.overrides], where)
        try:
            n = parameter_count(typed(cfg))  # the composed config typed, as the run will take it
        except MltrainError as err:
            raise ConfigError(f"{where}: {err}") from None
        per_step = int(cfg.train.batch_size) * int(cfg.model.block_size)
        ratio = scale.tokens_per_param if scale.tokens_per_param is not None else study.tokens_per_param
        if scale.max_steps is not None:
            steps = scale.max_steps
        elif ratio is not None:
            steps = steps_for(ratio, n, per_step)
        else:  # refused before by the study's checks (schema.py), in these words
            raise ConfigError(f"scale {name} needs max_steps or tokens_per_param (its own or the study's)")
        sizes[name] = ScaleSize(n, int(steps), per_step, tuple(cfg.logger.tags), int(cfg.model.n_layer),
                                int(cfg.model.n_embd))
        cfg.train.max_steps = int(steps)
        configs[name] = cfg
    check_rungs(study.ladder_axis, sizes, configs)
    return sizes


def check_rungs(axis: str, sizes: dict[str, ScaleSize], configs: dict[str, Any]) -> None:
    """ConfigError (one line) when two rungs share their value on the axis (a ladder that does not vary
    it), or differ in a key other than the axis's own and those that follow from it."""
    from mltrain.runs.keys import is_bookkeeping, matches
    from mltrain.training.resume import config_differences

    names, keys, words = list(sizes), AXES[axis].keys, AXES[axis].words
    seen: dict[float, str] = {}
    for name in names:
        value = sizes[name].on_axis(axis)
        if value in seen:
            raise ConfigError(f"ladder_axis={axis}: rungs {seen[value]} and {name} have the same "
                              f"{words} ({value:g}): a ladder's rungs must vary its axis")
        seen[value] = name
    allowed = (*keys, *FOLLOWS_FROM_AXIS)
    if not names:
        return
    first = names[0]
    for name in names[1:]:
        for diff in config_differences(configs[first], configs[name]):
            key = diff.split(" (", 1)[0]
            if not matches(key, allowed) and not is_bookkeeping(key):
                raise ConfigError(
                    f"ladder_axis={axis}: rungs {first} and {name} also differ in {diff.replace(' there', f' at {first}').replace(' here', f' at {name}')}"
                    f": a {words} ladder varies {', '.join(keys) or 'the token budget'} alone "
                    f"(and what follows from it: {', '.join(FOLLOWS_FROM_AXIS)}); set other keys in common"
                )


def setting_key(arm: str, setting: dict[str, str]) -> tuple:
    return (arm, tuple(sorted(setting.items())))


def check_settings(study: StudyConfig, sweeps: Iterable[Sweep], sizes: dict[str, ScaleSize],
                   composer: Composer) -> tuple[dict[tuple, DictConfig], dict[tuple, Config]]:
    """Compose and validate every setting of these (tuning) sweeps, with every override its runs get:
    {(scale, arm, setting): config} as composed (what a run dir's saved config is compared with) and
    as the typed run config (what the costs and run kinds are read from)."""
    from mltrain.config import validate_composed

    composed, configs = {}, {}
    for sweep in sweeps:
        seen, first = set(), None  # first: the sweep's first composed config, the others are it with their values
        for run in sweep.runs():
            key = (sweep.scale, *setting_key(sweep.arm, run.setting))
            if key in seen:
                continue
            seen.add(key)
            where = f"scale {sweep.scale}, arm {sweep.arm}" + "".join(f", {k}={v}" for k, v in run.setting.items())
            cfg = with_values(first, run.values) if first is not None else None
            if cfg is None:
                cfg = composer.compose(sweep.job_overrides(run, study, sizes[sweep.scale].tags), where)
                first = first or cfg
            try:
                configs[key] = validate_composed(cfg)
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None
            composed[key] = cfg
    return composed, configs


def with_values(composed: Any, values: Iterable[tuple[str, str]]) -> Any:
    """`composed` with these `key=value` overrides set, as Hydra would compose them, or None where one
    is not a plain value of an existing key (a config group, an addition, a deletion): compose those.
    The settings of a sweep differ in their swept values only, and composing each costs ~0.3 s."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    missing = object()
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in values])
    if not all(o.type == OverrideType.CHANGE and o.package is None and not o.is_sweep_override()
               and OmegaConf.select(composed, o.key_or_group, default=missing) is not missing
               and not OmegaConf.is_config(OmegaConf.select(composed, o.key_or_group)) for o in parsed):
        return None
    cfg = composed.copy()
    for o in parsed:
        OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
    return cfg


def typed_study(study: DictConfig) -> StudyConfig:
    """The composed study config as a `StudyConfig` instance, made once after the checks that name a
    missing or malformed key of the composed one (schema.check, sanity.check): the stages take it."""
    # a structured config of StudyConfig becomes an instance of it
    return cast(StudyConfig, OmegaConf.to_object(study))


def check_seeds(study: StudyConfig) -> None:
    for seed in [*study.selection_seeds, *study.extra_selection_seeds, *study.seeds, *(s for r in study.ladder.values() for s in (r.seeds or []))]:
        if not 0 <= seed < 2**32:
            raise ConfigError(f"seed {seed} must be in [0, 2**32)")


def check_earlier_runs(runs: Iterable[Run], configs: dict[tuple, DictConfig]) -> None:
    """ConfigError for the first run folder that holds a run of other settings than the study's."""
    from mltrain.training.resume import config_differences

    for run in runs:
        saved = run.dir / ".hydra" / "config.yaml"
        cfg = configs.get((run.sweep.scale, *setting_key(run.sweep.arm, run.setting)))
        if cfg is None or not saved.exists():
            continue
        expected = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))  # a DictConfig's: a dict
        expected[SEED] = run.seed
        earlier = OmegaConf.load(saved)
        if not isinstance(earlier, DictConfig):
            raise ConfigError(f"{saved} holds a list, not a run's config: move that run away")
        diffs = config_differences(earlier, expected)
        if diffs:
            raise ConfigError(
                f"{run.dir} holds a run made with other settings than this study's ({'; '.join(diffs[:3])}"
                f"{'; ...' if len(diffs) > 3 else ''}): choose another dir= for the study, or move that run away"
            )


def arm_kind(cfg: Config) -> str:
    """The run kind of a typed run config, as summary.json will say it."""
    from mltrain.method.plan import run_kind

    return str(run_kind(cfg))


def arm_label(study: StudyConfig, scale: str, arm: str, max_steps: int, kind: str, tuned: Iterable[str]) -> str:
    """The arm's label as mltrain-compare names it: its runs' overrides minus seed, budget and the
    tuned keys, as mltrain.runs.names.run_label writes a run's label."""
    from mltrain.runs.names import run_label
    from mltrain.tools.study.plan import grid_values, key_of
    from mltrain.tools.study.schema import BUDGET

    dropped = {BUDGET, SEED, *tuned}
    one_value = [f"{k}={v[0]}" for k, v in grid_values(study.arms[arm]).items() if len(v) == 1]  # a fixed setting
    overrides = [*arm_overrides(study, scale, arm, max_steps), *one_value]
    return run_label([o for o in overrides if key_of(o) not in dropped], kind)


def arm_kinds(configs: dict[tuple, Config]) -> dict[tuple[str, str], str]:
    """(scale, arm) -> the run kind of its runs."""
    return {(scale, arm): arm_kind(cfg) for (scale, arm, _), cfg in configs.items()}


def check_labels(study: StudyConfig, sizes: dict[str, ScaleSize], kinds: dict[tuple[str, str], str]) -> dict[str, dict[str, str]]:
    """Each arm's label at each scale in the verdict (every arm's tuned keys left out); ConfigError
    when two arms would share one, which mltrain-compare could not tell apart."""
    from mltrain.tools.compare import TUNED_KEYS
    from mltrain.tools.study.schema import varied_keys

    # mltrain-compare leaves out of an arm's label the keys it tunes: its own (TUNED_KEYS) and the study's
    tuned = {*TUNED_KEYS, *varied_keys(study)}
    labels: dict[str, dict[str, str]] = {}
    for scale in study.ladder:
        seen: dict[str, str] = {}
        for arm in study.arms:
            label = arm_label(study, scale, arm, sizes[scale].max_steps, kinds[(scale, arm)], tuned)
            if label in seen:
                raise ConfigError(f"arms {seen[label]} and {arm} differ only in tuned keys (label {label!r}): "
                                  "mltrain-compare could not tell them apart; give one of them a fixed override of its own")
            seen[label] = arm
            labels.setdefault(scale, {})[arm] = label
    return labels
