"""What a study runs and where: its sweeps, their runs, their folders and their `mltrain -m` lines.

    <dir>/<scale>/tune/<arm>/<grid values>,seed=S      stage 1: every setting on the selection seeds
    <dir>/<scale>/eval/<arm>/<chosen values>,seed=S    stage 2: the chosen setting on the evaluation
                                                        seeds; the single-level arm: each budget at the
                                                        setting chosen for that budget (the frontier)
    <dir>/<scale>/tune/<control>@frontier/...          the control's schedule at the frontier's budgets, each
                                                        at the fine LR and warm-up chosen there
    <dir>/<scale>/eval/<control>@frontier/...          ... at the budgets where it was the best single-level run
    <dir>/<scale>/eval/<arm>@runner_up/...             an arm's runner-up setting (a near tie) on the evaluation seeds
    <dir>/<scale>/selection.json                       the settings stage 1 chose
    <dir>/<scale>/verdict/comparison.{md,json,png}     stage 3: mltrain-compare on the scale
    <dir>/ladder.{md,json,png}                         stage 4: across scales
    <dir>/study.log                                    what the sweeps printed (each run also has its own)

A sweep is one `mltrain -m` line (a Cartesian product, as Hydra's sweeper makes it). Its runs' folders
are named by the swept keys only (the fixed ones go into Hydra's `override_dirname.exclude_keys`), so
a folder says which setting and seed it holds, and the study knows every folder before launching.
Overrides are written as Hydra writes them back (`1e-3` -> `0.001`), so the names predicted here are
the names Hydra gives. Torch-free.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser

from mltrain.core.errors import ConfigError, override_line
from mltrain.runs.keys import override_value
from mltrain.runs.names import short_dirname
from mltrain.tools.study.schema import (BUDGET, SEED, ArmConfig, LauncherConfig, StudyConfig, eval_seeds, frontier_arm,
                                        tuned_keys)

TUNE, EVAL = "tune", "eval"  # the stages that launch runs; also the runs' W&B job_type
AT_FRONTIER, RUNNER_UP = "@frontier", "@runner_up"  # folder suffixes (arm names cannot hold '@')
WARMUP, COARSE_STEPS, FINE_LR = "schedule.warmup_steps", "multilevel.coarse_steps", "optim.lr"
BOOKKEEPING = ("train.resume=true", "train.progress=false")

_parser = OverridesParser.create()


# ---------------------------------------------------------------------------------------------
# Overrides, as Hydra writes them


def parse(override: str) -> Any:
    """Hydra's parsed override; ConfigError (one line) for a malformed one."""
    try:
        return _parser.parse_overrides([override])[0]
    except Exception as err:  # noqa: BLE001 - Hydra's OverrideParseException and friends
        raise ConfigError(override_line(override, str(err).splitlines()[0])) from None  # with how to quote it


# key_of and canonical are kept per override text: a study plans thousands of runs from a few dozen
# overrides, and each parse by Hydra's grammar costs about a millisecond.
@functools.lru_cache(maxsize=4096)
def key_of(override: str) -> str:
    return parse(override).key_or_group


@functools.lru_cache(maxsize=4096)
def canonical(override: str) -> str:
    """`key=value` as Hydra's sweeper hands it to a job (and as the job's folder name spells it)."""
    o = parse(override)
    if o.is_sweep_override():
        raise ConfigError(f"{override!r}: a sweep in a fixed override; put the values in an arm's grid")
    return f"{o.get_key_element()}={o.get_value_element_as_str()}"  # as Hydra's BasicSweeper writes it


def value_text(value: Any) -> str:
    """A YAML value as override text (before canonical() spells it Hydra's way)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    return str(value)


def setting_text(key: str, value: Any) -> str:
    """The canonical value text of `key=value` (the part after '=')."""
    return override_value(canonical(f"{key}={value_text(value)}")) or ""  # key=<text> always has a value


def merged(*groups: Iterable[str]) -> list[str]:
    """Overrides in order, canonical, one per key: a later group's value wins (as it would in Hydra)."""
    by_key: dict[str, str] = {}
    for group in groups:
        for o in group:
            c = canonical(o)
            by_key.pop(key_of(c), None)  # re-inserted last: the order says which group set it
            by_key[key_of(c)] = c
    return list(by_key.values())


def label_parts(label: str, kind: str) -> frozenset:
    """A configuration label (overrides joined by ',') as a set of overrides, without the keys that
    mltrain's own labels leave out (bookkeeping; the sections of methods the run does not use): two
    spellings of one arm's label compare equal."""
    from mltrain.runs.keys import BOOKKEEPING_KEYS, label_overrides, matches, override_key, unread_keys

    drop = (*BOOKKEEPING_KEYS, *unread_keys(kind))
    return frozenset(p for p in label_overrides(label) if p != "default" and not matches(override_key(p), drop))


def quoted(text: str) -> str:
    """A path as a Hydra override value (quoted, so spaces and special characters survive)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ---------------------------------------------------------------------------------------------
# Sweeps and runs


@dataclass(frozen=True)
class Run:
    sweep: "Sweep"
    values: tuple[tuple[str, str], ...]  # the swept keys' values (seed included), canonical text

    @property
    def dirname_full(self) -> str:
        """Hydra's override_dirname of the job: its swept overrides, sorted, joined by ','."""
        return ",".join(sorted(f"{k}={v}" for k, v in self.values))

    @property
    def dir(self) -> Path:
        return self.sweep.dir / short_dirname(self.dirname_full)

    @property
    def setting(self) -> dict[str, str]:
        """The values of the tuned keys and the budget (everything swept but the seed)."""
        return {k: v for k, v in self.values if k != SEED}

    @property
    def seed(self) -> int:
        return int(dict(self.values)[SEED])

    @property
    def name(self) -> str:
        return f"{self.sweep.scale}/{self.sweep.stage}/{self.sweep.dir.name}/{self.dir.name}"


@dataclass(frozen=True)
class Sweep:
    scale: str
    stage: str  # TUNE or EVAL
    arm: str
    dir: Path  # hydra.sweep.dir; several sweeps may share one (the frontier's budgets)
    fixed: tuple[str, ...]  # canonical overrides every run of the sweep has
    swept: tuple[tuple[str, tuple[str, ...]], ...]  # key -> canonical values, seed last

    def runs(self) -> list[Run]:
        keys = [k for k, _ in self.swept]
        return [Run(self, tuple(zip(keys, combo))) for combo in itertools.product(*(v for _, v in self.swept))]

    def _bookkeeping(self, study: StudyConfig, tags: Iterable[str]) -> list[str]:
        """What the study adds to every run: resume, no progress bar, and its W&B tag, group, job type."""
        return [*BOOKKEEPING, f"logger.tags=[{','.join(dict.fromkeys([*tags, study.name]))}]",
                f"logger.group={self.scale}/{self.arm}", f"logger.job_type={self.stage}",
                *(["train.allow_long=true"] if getattr(study, "allow_long", False) else [])]

    def job_overrides(self, run: Run, study: StudyConfig, tags: Iterable[str] = ()) -> list[str]:
        """The overrides one run of this sweep gets from Hydra (what the study composes to check it)."""
        return [*self.fixed, *(f"{k}={v}" for k, v in run.values), *self._bookkeeping(study, tags)]

    def overrides(self, study: StudyConfig, tags: Iterable[str] = ()) -> list[str]:
        """The `mltrain -m` arguments of this sweep."""
        task = [*self.fixed, *(f"{k}={','.join(v)}" for k, v in self.swept), *self._bookkeeping(study, tags)]
        named = {k for k, _ in self.swept}
        excluded = sorted({key_of(o) for o in task} - named)  # folders are named by the swept keys only
        return [
            *task,
            *launcher_overrides(study.launcher),
            f"hydra.sweep.dir={quoted(str(self.dir))}",
            f"hydra.job.config.override_dirname.exclude_keys=[{','.join(excluded)}]",
        ]


def launcher_overrides(launcher: LauncherConfig) -> list[str]:
    """The Hydra overrides that choose and set a sweep's launcher (the study's `launcher` section)."""
    return [f"hydra/launcher={launcher.name}",
            *([f"hydra.launcher.n_jobs={launcher.n_jobs}"] if launcher.n_jobs is not None else []),
            *launcher.overrides]


@dataclass
class Layout:
    """The study's folders and files (see the module docstring)."""

    root: Path
    steps: dict[str, int] = field(default_factory=dict)  # scale -> train.max_steps (the warm-up values follow it)

    def scale(self, scale: str) -> Path:
        return self.root / scale

    def sweep(self, scale: str, stage: str, arm: str) -> Path:
        return self.root / scale / stage / arm

    def selection(self, scale: str) -> Path:
        return self.root / scale / "selection.json"

    def verdict(self, scale: str) -> Path:
        return self.root / scale / "verdict"

    @property
    def log(self) -> Path:
        return self.root / "study.log"  # what the sweeps printed

    @property
    def ladder(self) -> Path:
        return self.root / "ladder"  # ladder.md, ladder.json, ladder.png


def arm_overrides(study: StudyConfig, scale: str, arm: str, max_steps: Optional[int]) -> list[str]:
    """Every fixed override of the arm's runs at this scale: plugins < common < extra < scale < steps < preset < arm."""
    steps = [f"train.max_steps={max_steps}"] if max_steps is not None else []
    a = study.arms[arm]
    handed = [f"plugins=[{','.join(study.plugins)}]"] if study.plugins else []  # the study's plugins, to each run
    handed += [f"hydra.searchpath=[{','.join(study.searchpath)}]"] if study.searchpath else []  # and its folders
    return merged(handed, study.common, study.extra, study.ladder[scale].overrides, steps,
                  [f"experiment={a.experiment}"], a.overrides)


def _sweep(study: StudyConfig, layout: Layout, scale: str, stage: str, arm: str, max_steps: Optional[int],
           values: dict[str, list[str]], seeds: Iterable[int]) -> Sweep:
    fixed = [o for o in arm_overrides(study, scale, arm, max_steps) if key_of(o) not in values]
    swept = tuple((k, tuple(v)) for k, v in values.items()) + ((SEED, tuple(str(s) for s in seeds)),)
    return Sweep(scale, stage, arm, layout.sweep(scale, stage, arm), tuple(fixed), swept)


def grid_values(arm: ArmConfig) -> dict[str, list[str]]:
    """The arm's grid as canonical value texts, key by key (train.budget last)."""
    keys = [*tuned_keys(arm), *([BUDGET] if BUDGET in arm.grid else [])]
    return {k: [setting_text(k, v) for v in arm.grid[k]] for k in keys}


def warmup_values(study: StudyConfig, steps: Optional[int]) -> list[str]:
    """The frontier's warm-up lengths at a rung of `steps` steps (none added when no fraction is set)."""
    fractions = list(study.frontier.warmup_fractions)
    if not fractions:
        return []
    if steps is None:
        raise ConfigError("the frontier's warm-up lengths need each rung's steps (internal: no steps given)")
    return list(dict.fromkeys(str(round(f * steps)) for f in fractions))


def frontier_values(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int] = None,
                    budgets: Optional[list[str]] = None) -> dict[str, list[str]]:
    """The frontier arm's swept values at a rung: its grid, the warm-up lengths, the budgets (last)."""
    values = grid_values(study.arms[frontier_arm(study)])
    warmups = warmup_values(study, max_steps or layout.steps.get(scale))
    if warmups:
        values = {WARMUP: warmups, **{k: v for k, v in values.items() if k != WARMUP}}
    budget = values.pop(BUDGET)
    budget = list(budgets) if budgets is not None else budget
    return {**values, BUDGET: [b for b in budget if not halved(study, b)]}  # the halved ones follow (tuning.py)


def halved(study: StudyConfig, budget: str) -> bool:
    """Whether the frontier runs this budget at the best warm-ups of the budget below only (successive
    halving: frontier.halving_from), not at every warm-up from the start."""
    start = study.frontier.halving_from
    return start is not None and float(budget) > start + 1e-9 and bool(study.frontier.warmup_fractions)


def halving_sweep(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int], budget: str,
                  warmups: list[str]) -> Sweep:
    """The frontier's grid at a halved budget, at the warm-ups kept from the budget below."""
    values = frontier_values(study, layout, scale, max_steps, [])
    values = {**values, WARMUP: list(warmups), BUDGET: [budget]}
    return _sweep(study, layout, scale, TUNE, frontier_arm(study), max_steps, values, study.selection_seeds)


def tuning_sweeps(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int] = None,
                  budgets: Optional[list[str]] = None) -> list[Sweep]:
    """Stage 1: one sweep per arm, its whole grid on the selection seeds (the frontier's with its warm-up
    lengths and `budgets`, default its grid's)."""
    frontier = frontier_arm(study)
    return [_sweep(study, layout, scale, TUNE, arm, max_steps,
                   frontier_values(study, layout, scale, max_steps, budgets) if arm == frontier
                   else grid_values(study.arms[arm]), study.selection_seeds)
            for arm in study.arms]


def setting_sweep(study: StudyConfig, layout: Layout, scale: str, stage: str, arm: str, setting: dict[str, str],
                  seeds: Iterable[int], max_steps: Optional[int] = None, folder: Optional[str] = None) -> Sweep:
    """One setting (every swept key but the seed) of an arm on `seeds`, in the arm's folder or `folder`."""
    sweep = _sweep(study, layout, scale, stage, arm, max_steps, {k: [v] for k, v in setting.items()}, seeds)
    if folder is None:
        return sweep
    return Sweep(scale, stage, arm, layout.sweep(scale, stage, folder), sweep.fixed, sweep.swept)


def control_coarse_steps(study: StudyConfig, scale: str) -> int:
    """The control arm's multilevel.coarse_steps at a rung (its length at budget 1)."""
    arm = _control_arm(study)
    found = [v for o in arm_overrides(study, scale, arm, None)
             if key_of(o) == COARSE_STEPS and (v := override_value(o)) is not None]
    if not found:
        raise ConfigError(f"frontier.control_arm={arm}: set {COARSE_STEPS} in the rung's or the arm's overrides "
                          "(its length at every budget follows from it)")
    return int(found[-1])


def _own_values(study: StudyConfig, scale: str, arm: str, key: str) -> set[str]:
    """The values of `key` the arm's own tuning runs have at a rung: its grid's, else its fixed override's."""
    if key in study.arms[arm].grid:
        return set(grid_values(study.arms[arm]).get(key, []))
    values = (override_value(o) for o in arm_overrides(study, scale, arm, None) if key_of(o) == key)
    return {v for v in values if v is not None}


def _control_arm(study: StudyConfig) -> str:
    """frontier.control_arm, where the caller has a control schedule to plan (ConfigError if none is set)."""
    if study.frontier.control_arm is None:
        raise ConfigError("frontier.control_arm is not set: no control schedule to plan (internal)")
    return study.frontier.control_arm


def control_sweeps(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int],
                   picks: dict[str, dict[str, str]], own_choice: Optional[dict[str, str]] = None) -> list[Sweep]:
    """The control's schedule at each budget of the frontier (`picks`: budget -> the frontier's chosen
    setting there), at the fine LR and warm-up the frontier chose at that budget, tuning only its own knobs:
    its grid's other keys on the first selection seed, its length (coarse steps) scaled by the budget and
    each length factor; with frontier.control_grid false, only the setting its own arm chose (`own_choice`).
    Where that is the control arm's own setting (budget 1, factor 1, its fine LR and warm-up), its own
    tuning runs are that point already."""
    arm = study.frontier.control_arm
    if arm is None:
        return []
    base, sweeps = control_coarse_steps(study, scale), []
    for budget, pick in picks.items():
        fine = {k: v for k, v in pick.items() if k in (FINE_LR, WARMUP)}
        values = grid_values(study.arms[arm])
        if not study.frontier.control_grid and own_choice:  # its own arm's chosen setting, not its grid
            values = {**values, **{k: [v] for k, v in own_choice.items() if k in values}}
        own = all(v in _own_values(study, scale, arm, k) for k, v in fine.items())
        lengths = [str(max(1, round(base * float(budget) * f))) for f in study.frontier.control_length_factors]
        lengths = [n for n in dict.fromkeys(lengths) if not (own and float(budget) == 1.0 and int(n) == base)]
        if lengths:
            values = {**values, **{k: [v] for k, v in fine.items()}, COARSE_STEPS: lengths, BUDGET: [budget]}
            sweep = _sweep(study, layout, scale, TUNE, arm, max_steps, values, study.selection_seeds[:1])
            sweeps.append(Sweep(scale, TUNE, arm, layout.sweep(scale, TUNE, arm + AT_FRONTIER), sweep.fixed, sweep.swept))
    return sweeps


@dataclass
class Choice:
    """What stage 1 chose for one arm: a setting (tuned key -> canonical value), and for the frontier
    arm one per budget."""

    setting: dict[str, str] = field(default_factory=dict)
    by_budget: dict[str, dict[str, str]] = field(default_factory=dict)  # budget text -> setting
    # the frontier's budgets where the control's schedule was the best single-level run: budget -> its setting
    control_by_budget: dict[str, dict[str, str]] = field(default_factory=dict)
    runner_up: dict[str, str] = field(default_factory=dict)  # a near tie's second setting, evaluated too


def evaluation_sweeps(study: StudyConfig, layout: Layout, scale: str, choices: dict[str, Choice],
                      max_steps: Optional[int] = None) -> list[Sweep]:
    """Stage 2: each arm's chosen setting on the evaluation seeds; the frontier arm's budgets, grouped
    by the setting chosen for them (one sweep per distinct setting), and where the control's schedule
    won a budget, that schedule as well. Arms stage 1 chose nothing for are left out (the report says so)."""
    sweeps, frontier, seeds = [], frontier_arm(study), eval_seeds(study, scale)
    for arm, choice in choices.items():
        if arm != frontier and choice.setting:
            sweeps.append(setting_sweep(study, layout, scale, EVAL, arm, choice.setting, seeds, max_steps))
        if choice.runner_up:
            sweeps.append(setting_sweep(study, layout, scale, EVAL, arm, choice.runner_up, seeds, max_steps,
                                        arm + RUNNER_UP))
        if arm != frontier:
            continue
        for budget, setting in choice.control_by_budget.items():
            control = _control_arm(study)
            sweeps.append(setting_sweep(study, layout, scale, EVAL, control, {**setting, BUDGET: budget}, seeds,
                                        max_steps, control + AT_FRONTIER))
        # every budget's own single-level choice runs too, where the control's schedule won it: the
        # control arm is measured against the frontier without its own schedule, which needs these
        groups: dict[tuple, list[str]] = {}
        for budget, setting in choice.by_budget.items():
            groups.setdefault(tuple(sorted(setting.items())), []).append(budget)
        for pairs, budgets in groups.items():
            values = {**{k: [v] for k, v in pairs}, BUDGET: budgets}
            sweeps.append(_sweep(study, layout, scale, EVAL, arm, max_steps, values, seeds))
    return sweeps


def possible_evaluation_runs(study: StudyConfig, layout: Layout, scale: str) -> list[Run]:
    """Every run stage 2 could launch whatever stage 1 chooses: each grid point on the evaluation
    seeds (what a check of earlier runs on disk must cover before anything starts)."""
    runs, frontier = [], frontier_arm(study)
    every = tuple(setting_text(BUDGET, b) for b in study.arms[frontier].grid[BUDGET])  # the halved ones too
    for sweep in tuning_sweeps(study, layout, scale):
        seeds = tuple(str(s) for s in eval_seeds(study, scale))
        swept = tuple((k, v) if k != SEED else (k, seeds) for k, v in sweep.swept)
        if sweep.arm == frontier:
            swept = tuple((k, every) if k == BUDGET else (k, v) for k, v in swept)
        runs += Sweep(scale, EVAL, sweep.arm, layout.sweep(scale, EVAL, sweep.arm), sweep.fixed, swept).runs()
    return runs


def evaluation_run_count(study: StudyConfig, scale: str) -> int:
    """Runs stage 2 launches at one scale (known before stage 1 has chosen anything)."""
    frontier = frontier_arm(study)
    per_seed = sum(len(a.grid[BUDGET]) if name == frontier else 1 for name, a in study.arms.items())
    return per_seed * len(eval_seeds(study, scale))
