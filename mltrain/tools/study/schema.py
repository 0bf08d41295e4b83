"""A study's config: the typed schema every `conf/study/<name>.yaml` is merged onto, and the checks a
type cannot say.

    mltrain-study study=cpu_ladder seeds=[1,2,3,4] launcher.n_jobs=2

The schema is registered in Hydra's ConfigStore as `mltrain_study_schema` (the first default of
conf/mltrain_study.yaml), so a misspelt key (`seed=[1,2]`, `arms.single.grd=...`) stops the study while
it is composed, before anything runs. `check()` then says, in one line, what is wrong with a study that
type-checks: an arm without a grid, arms tuned unequally, seeds used both to select and to measure.

Torch-free: `--status` and the checks run without the training stack.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from mltrain.core.errors import ConfigError
from mltrain.runs.keys import BUDGET_KEY as BUDGET  # the frontier axis: swept by the single-level arm, never tuned
from mltrain.runs.keys import SEED_KEY as SEED
from mltrain.runs.keys import override_key
from mltrain.tools.study.axes import AXES  # what a ladder's rungs may vary
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # arm and scale names become folder names
# budgets a frontier needs before bracketing can find an arm past its data: the points a bound is read on
# (mltrain/tools/compare/ondata.py reads one on an envelope of 2 points or more, without a fit)
BRACKET_POINTS = 2


@dataclass
class ArmConfig:
    """One method, tuned: a method preset, fixed overrides, and a grid of tuned keys."""

    experiment: str = MISSING  # the method preset, conf/experiment/<name>.yaml
    overrides: List[str] = field(default_factory=list)  # fixed for every run of the arm
    # tuned key -> the values tried, e.g. {optim.lr: [0.03, 0.1]}; every combination is one setting.
    # The single-level arm also lists train.budget: its budgets at the best LR of each make the frontier.
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    # Settings tried by hand before the study, that fixed this grid (pilots on the selection seed; the
    # yaml says which): the report counts them with the settings the study ran.
    pilots: int = 0


@dataclass
class FrontierConfig:
    """The single-level frontier's tuning beyond its arm's grid (every default keeps a study as cheap as
    its grid alone). See tuning.py for the rules."""

    # warm-up lengths tried at every budget, as fractions of the rung's steps (schedule.warmup_steps =
    # round(fraction x train.max_steps)); empty: the rung's own warm-up only
    warmup_fractions: List[float] = field(default_factory=list)
    # after the coarse grid: each budget's chosen LR's x sqrt(3) neighbours, on the first selection seed
    lr_neighbours: bool = False
    # a study arm (the LR-schedule control) whose schedule is also tried at every budget of the frontier
    # (its grid on the first selection seed, multilevel.coarse_steps scaled by the budget and each factor)
    control_arm: Optional[str] = None
    control_length_factors: List[float] = field(default_factory=lambda: [1.0])
    # bracketing: while an arm's equal-loss point lies beyond the frontier's data, add budgets 3, 4, ...
    # (times the steps) up to this; null: never
    max_budget: Optional[float] = None
    # successive halving over the warm-ups: every warm-up length at the budgets up to this one; above it,
    # each budget's grid runs at the halving_keep best warm-ups of the budget below (on the selection
    # seeds). null: every warm-up at every budget
    halving_from: Optional[float] = None
    halving_keep: int = 1
    # a near tie of a budget's frontier choice also runs the extra selection seeds (as the other arms' do)
    ties: bool = True
    # the control's schedule at each budget: its whole grid (true) or only the setting its own arm chose
    # (false; its length still follows the budget and each length factor)
    control_grid: bool = True


@dataclass
class ScaleConfig:
    """One rung of the ladder: a model size and its token budget."""

    overrides: List[str] = field(default_factory=list)  # the model's size (model.n_embd=...) and the like
    # train.max_steps = tokens_per_param x parameters / (batch x context); null: the study's ratio
    tokens_per_param: Optional[float] = None
    max_steps: Optional[int] = None  # or the steps themselves (then tokens_per_param is left unused)
    # the evaluation seeds of this rung; null: the study's. A rung too costly for the study's seeds
    # measures on fewer (the yaml says why); they must still be apart from the selection seeds.
    seeds: Optional[List[int]] = None


@dataclass
class LauncherConfig:
    """Where the runs go: Hydra's launcher for every sweep (mltrain has no scheduler of its own)."""

    name: str = "basic"  # hydra/launcher=<name>: basic (one process), local (joblib workers), slurm, ...
    n_jobs: Optional[int] = None  # hydra.launcher.n_jobs (parallel workers of `local`); null: the launcher's
    overrides: List[str] = field(default_factory=list)  # more hydra.launcher.* settings (partition, ...)
    # The runs' environment, e.g. OMP_NUM_THREADS=1 for parallel CPU workers (in this process too:
    # torch's intra-op threads follow it while a sweep runs here).
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class StudyConfig:
    name: str = MISSING
    dir: str = "studies/${name}"  # the study's runs and reports
    common: List[str] = field(default_factory=list)  # overrides of every run
    # more overrides of every run, after common: for the command line, e.g. "extra=['logger=wandb']"
    extra: List[str] = field(default_factory=list)
    arms: Dict[str, ArmConfig] = field(default_factory=dict)
    selection_seeds: List[int] = field(default_factory=lambda: [0])  # each arm's setting is chosen here
    # Where an arm's best settings lie within tie_nats on the selection seeds, those settings also run on
    # these seeds and the choice is made on the mean over all of them; the runner-up is evaluated too.
    extra_selection_seeds: List[int] = field(default_factory=list)
    tie_nats: float = 0.02
    # A chosen value at the edge of its grid gets one more value beyond it (at the grid's own ratio, on
    # the first selection seed), up to this many per side.
    grid_extensions: int = 0
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    seeds: List[int] = field(default_factory=lambda: [1, 2, 3, 4])  # ... and measured here
    tokens_per_param: Optional[float] = None  # the ladder's default token budget
    # What the rungs vary, the x-axis of the ladder report: params (the model's size, whatever changes
    # it), depth (model.n_layer), width (model.n_embd), tokens_per_param (the token budget) or another
    # axis registered in axes.py. Each rung's value is read from its composed config, never typed twice.
    ladder_axis: str = "params"
    ladder: Dict[str, ScaleConfig] = field(default_factory=dict)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    # Sizes (parameters) the ladder report extrapolates each arm's trend to, marked as extrapolation.
    predict_params: List[float] = field(default_factory=list)
    # A study that would take more than a day on this machine (its planned FLOPs at a rate no run
    # reaches) is refused unless this is true; its runs then get train.allow_long=true too.
    allow_long: bool = False
    # Must-be-equal values (mltrain/runs/environment.py MUST_EQUAL: code, python, torch, numpy, threads,
    # device, corpus, held_out) in which the runs already in `dir` may differ from this machine's (or
    # from each other's): a continuation elsewhere is refused unless named here; the reports say so.
    allow_env_change: List[str] = field(default_factory=list)
    # Modules of one's own (mltrain/method/plugins.py: a depth method, a scheme, a ladder axis), imported
    # before the study is composed and handed to every run (`plugins=[...]` among its overrides).
    plugins: List[str] = field(default_factory=list)
    # The runs' hydra.searchpath (the folders their presets are found in, an arm's `experiment` of one's
    # own): by default the one the study is given (`mltrain-study study=mine 'hydra.searchpath=[file://mine]'`).
    searchpath: List[str] = field(default_factory=list)


def register() -> None:
    ConfigStore.instance().store(name="mltrain_study_schema", node=StudyConfig)


# ---------------------------------------------------------------------------------------------
# What a type cannot say


def tuned_keys(arm: ArmConfig) -> list[str]:
    """The arm's tuned keys: its grid minus the frontier's train.budget."""
    return [k for k in arm.grid if k != BUDGET]


def varied_keys(study: StudyConfig) -> list[str]:
    """The tuned keys some arm tries more than one value of: the verdict tunes over these (a key with one
    value is a fixed setting of its arm, and stays in the arm's label)."""
    return list(dict.fromkeys(k for arm in study.arms.values() for k in tuned_keys(arm) if len(arm.grid[k]) > 1))


def settings_count(arm: ArmConfig) -> int:
    """How many settings the arm tries: the product of its tuned keys' value counts."""
    return math.prod(len(arm.grid[k]) for k in tuned_keys(arm))


def eval_seeds(study: StudyConfig, scale: str) -> list[int]:
    """The evaluation seeds of one rung: its own, or the study's."""
    own = study.ladder[scale].seeds
    return list(own) if own is not None else list(study.seeds)


def frontier_arm(study: StudyConfig) -> str:
    """The arm whose grid sweeps train.budget (the single-level frontier); check() makes it unique."""
    return next(name for name, arm in study.arms.items() if BUDGET in arm.grid)


def check(study: StudyConfig) -> None:
    """ConfigError with one line for the first problem of a composed study; touches no file."""
    if not _NAME.match(str(study.name)):
        raise ConfigError(f"name {study.name!r}: use letters, digits, '_', '.' or '-' (it names the study's folder "
                          "and its runs' W&B tag); nothing was written")
    if not study.arms:
        raise ConfigError(f"study {study.name} has no arms")
    if not study.ladder:
        raise ConfigError(f"study {study.name} has no ladder (scales)")
    for what, names in (("arm", study.arms), ("scale", study.ladder)):
        for name in names:
            if not _NAME.match(str(name)):
                raise ConfigError(f"{what} name {name!r}: use letters, digits, '_', '.' or '-' (it names a folder)")
    if study.ladder_axis not in AXES:
        raise ConfigError(f"ladder_axis={study.ladder_axis!r}: expected one of {', '.join(AXES)}")
    _check_seeds(study)
    for name, arm in study.arms.items():
        _check_arm(name, arm)
    frontier = [name for name, arm in study.arms.items() if BUDGET in arm.grid]
    if len(frontier) != 1:
        raise ConfigError(
            f"exactly one arm (the single-level one) must sweep {BUDGET} to make the frontier; "
            f"found {len(frontier)}{': ' + ', '.join(frontier) if frontier else ''}"
        )
    counts = {name: settings_count(arm) for name, arm in study.arms.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise ConfigError(f"the arms are tuned unequally ({listed} settings): give every arm's grid the same "
                          "number of settings, or the better-tuned arm wins by its tuning")
    for name, scale in study.ladder.items():
        _check_scale(name, scale, study.tokens_per_param)
    _check_tuning(study)
    if study.launcher.n_jobs is not None and study.launcher.n_jobs < 1:
        raise ConfigError(f"launcher.n_jobs={study.launcher.n_jobs} must be >= 1")
    if study.predict_params and study.ladder_axis != "params":
        raise ConfigError(f"predict_params extrapolates along parameters; this ladder's axis is {study.ladder_axis}: "
                          "leave predict_params empty")
    for p in study.predict_params:
        if not p > 0:
            raise ConfigError(f"predict_params: {p} must be a positive number of parameters")


def _check_seeds(study: StudyConfig) -> None:
    for key in ("selection_seeds", "seeds"):
        values = list(getattr(study, key))
        if not values:
            raise ConfigError(f"{key} is empty")
        if len(set(values)) != len(values):
            raise ConfigError(f"{key}={values} repeats a seed")
    for name, scale in study.ladder.items():
        if scale.seeds is not None:
            if not scale.seeds:
                raise ConfigError(f"scale {name}: seeds is empty (leave it out to use the study's)")
            if len(set(scale.seeds)) != len(scale.seeds):
                raise ConfigError(f"scale {name}: seeds={list(scale.seeds)} repeats a seed")
    measured = set(study.seeds) | {s for scale in study.ladder.values() for s in (scale.seeds or [])}
    both = sorted(set(study.selection_seeds) & measured)
    if both:
        raise ConfigError(
            f"seed{'s' if len(both) > 1 else ''} {both} in both selection_seeds and seeds: each arm's setting "
            "must be chosen on seeds apart from those that measure it"
        )


def _check_tuning(study: StudyConfig) -> None:
    """The frontier's added tuning and the selection's extra seeds, tie and grid extensions."""
    f = study.frontier
    if study.tie_nats < 0 or study.grid_extensions < 0:
        raise ConfigError(f"tie_nats={study.tie_nats} and grid_extensions={study.grid_extensions} must be >= 0")
    for name, arm in study.arms.items():
        if arm.pilots < 0:
            raise ConfigError(f"arm {name}: pilots={arm.pilots} must be >= 0")
    if any(not 0 < x < 1 for x in f.warmup_fractions) or len(set(f.warmup_fractions)) != len(f.warmup_fractions):
        raise ConfigError(f"frontier.warmup_fractions={list(f.warmup_fractions)}: distinct fractions of the steps, in (0, 1)")
    if not f.control_length_factors or any(not x > 0 for x in f.control_length_factors):
        raise ConfigError(f"frontier.control_length_factors={list(f.control_length_factors)}: positive factors, at least one")
    if f.control_arm is not None and (f.control_arm not in study.arms or f.control_arm == frontier_arm(study)):
        raise ConfigError(f"frontier.control_arm={f.control_arm}: name one of the study's other arms "
                          f"({', '.join(a for a in study.arms if a != frontier_arm(study))})")
    if f.halving_keep < 1 or (f.halving_from is not None and not f.halving_from > 0):
        raise ConfigError(f"frontier.halving_from={f.halving_from}, halving_keep={f.halving_keep}: a positive budget "
                          "and at least one warm-up kept")
    if f.max_budget is not None and not 0 < f.max_budget <= 10:
        raise ConfigError(f"frontier.max_budget={f.max_budget} must be in (0, 10] (train.budget's range)")
    if f.max_budget is not None:
        _check_bracketing(study, f.max_budget)
    extra = list(study.extra_selection_seeds)
    if len(set(extra)) != len(extra):
        raise ConfigError(f"extra_selection_seeds={extra} repeats a seed")
    measured = set(study.seeds) | {s for scale in study.ladder.values() for s in (scale.seeds or [])}
    both = sorted(set(extra) & (measured | set(study.selection_seeds)))
    if both:
        raise ConfigError(f"extra_selection_seeds {both} also in selection_seeds or the evaluation seeds: "
                          "the extra selection seeds must be apart from both")


def _check_bracketing(study: StudyConfig, cap: float) -> None:
    """ConfigError unless frontier.max_budget can add a budget: bracketing adds the next whole multiple of
    the steps above the grid's largest budget, up to the cap, once an arm lies past the frontier's data,
    which takes a frontier of BRACKET_POINTS budgets or more to tell."""
    arm = frontier_arm(study)
    numbers = sorted({v for v in map(value_identity, study.arms[arm].grid[BUDGET]) if isinstance(v, float)})
    shown = ", ".join(f"{b:g}" for b in numbers)
    if len(numbers) < BRACKET_POINTS:
        raise ConfigError(f"frontier.max_budget={cap:g} cannot bracket: an arm past the frontier's data is told on "
                          f"{BRACKET_POINTS} budgets or more, and arm {arm} has {len(numbers)} ({BUDGET}: {shown}): "
                          f"give its grid more budgets, or leave frontier.max_budget out")
    nxt = math.floor(max(numbers)) + 1
    if nxt > cap + 1e-9:
        raise ConfigError(f"frontier.max_budget={cap:g} cannot bracket: the first budget it would add is {nxt:g} "
                          f"(the next whole multiple above arm {arm}'s largest, {max(numbers):g}): give a cap of "
                          f"{nxt:g} or more, or leave frontier.max_budget out")


def selection_seeds(study: StudyConfig) -> list[int]:
    """Every seed a choice may be made on: the selection seeds and the extra ones."""
    return [*study.selection_seeds, *getattr(study, "extra_selection_seeds", [])]


def value_identity(value: Any) -> Any:
    """What a grid value is, for telling two values apart: a number (however it is written: 0.3, '0.30',
    '3e-1'; 1 and 1.0) as a float, anything else as its stripped text."""
    if not isinstance(value, bool):
        try:
            number = float(str(value).strip())
        except ValueError:
            return str(value).strip()
        return "nan" if math.isnan(number) else number
    return str(value)


def _check_arm(name: str, arm: ArmConfig) -> None:
    if not tuned_keys(arm):
        raise ConfigError(f"arm {name} has no grid: list its tuned keys and their values, e.g. grid: {{optim.lr: [0.03, 0.1]}}")
    for key, values in arm.grid.items():
        if not values:
            raise ConfigError(f"arm {name}: grid key {key} has no values")
        seen: dict[Any, Any] = {}
        for v in values:
            same = seen.setdefault(value_identity(v), v)
            if same is not v:
                as_number = " (the same number)" if isinstance(value_identity(v), float) else ""
                raise ConfigError(f"arm {name}: grid key {key} repeats a value ({list(values)}: {same!r} and {v!r} "
                                  f"are one value{as_number}, so one setting would run twice into one job dir); "
                                  "nothing was written")
        if key == SEED:
            raise ConfigError(f"arm {name}: seed is not a tuned key (the study's selection_seeds and seeds choose it)")


def _check_scale(name: str, scale: ScaleConfig, study_ratio: Optional[float]) -> None:
    ratio = scale.tokens_per_param if scale.tokens_per_param is not None else study_ratio
    if scale.max_steps is None and ratio is None:
        raise ConfigError(f"scale {name} needs max_steps or tokens_per_param (its own or the study's)")
    if scale.max_steps is not None and scale.max_steps < 1:
        raise ConfigError(f"scale {name}: max_steps={scale.max_steps} must be >= 1")
    if scale.max_steps is None and ratio is not None and not ratio > 0:
        raise ConfigError(f"scale {name}: tokens_per_param={ratio} must be > 0")
    if any(override_key(o) == "train.max_steps" for o in scale.overrides):
        raise ConfigError(f"scale {name}: set its steps with max_steps or tokens_per_param, not train.max_steps in overrides")
