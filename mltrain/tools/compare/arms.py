"""Arms and equal tuning: which settings of each method were tried, and which one each arm keeps.

An *arm* is a method (a run kind and the overrides that are not tuned) with its tuned keys left free: the
configurations of an arm differ only in tuned keys and in `train.budget` (the fraction of
`train.max_steps` a run trains for). A *setting* is the values of the tuned keys of one configuration:
from its overrides, else from the run's resolved `.hydra/config.yaml`, else unknown (then left out).

Selection: each arm keeps, for each `train.budget`, the setting with the lowest mean final held-out
loss over the selection seeds, and its own numbers come from the runs of the setting kept at its
largest budget on the other seeds. Without selection seeds every seed both selects and measures: the
verdict is then optimistic (the winner's curse flatters every arm).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from mltrain.method.kinds import RunKind
from mltrain.runs.keys import (BUDGET_KEY, SEED_KEY, label_overrides, matches, override_key, override_value,
                               unread_keys)
from mltrain.tools.compare.loading import Configuration, Run

TUNED_KEYS = ("optim.lr", "multilevel.coarse_optim.lr", "schedule.warmup_steps", "optim.weight_decay")
NOT_SET = "default"  # a tuned key no override and no config file gives a value for


def label_parts(label: str) -> dict[str, str]:
    """A configuration label (sorted `key=value` overrides joined by ",") as key -> value text."""
    if label in ("", "default"):
        return {}
    out = {}
    for part in label_overrides(label):
        value = override_value(part)
        out[override_key(part)] = value if value is not None else ""
    return out


def typed(text: Any) -> Any:
    """An override's value as YAML would read a number: "0.1" -> 0.1, "100" -> 100; else unchanged."""
    if not isinstance(text, str):
        return text
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@functools.lru_cache(maxsize=256)
def _load_config(path: str, mtime_ns: int) -> Optional[Any]:
    """A run's config, read once per version of the file (a long-lived caller may compare again)."""
    try:
        from omegaconf import OmegaConf

        return OmegaConf.load(path)
    except Exception:  # noqa: BLE001 - a damaged config only costs the values it would have given
        return None


def _config_value(run: Run, key: str) -> Any:
    """`key` in the run's resolved .hydra/config.yaml: a plain value, else None."""
    path = Path(run.source) / ".hydra" / "config.yaml"
    try:
        cfg = _load_config(str(path), path.stat().st_mtime_ns) if path.is_file() else None
        if cfg is None:
            return None
        from omegaconf import OmegaConf

        value = OmegaConf.select(cfg, key, default=None)
    except Exception:  # noqa: BLE001 - no file to stat, an interpolation that does not resolve here
        return None
    return value if isinstance(value, (int, float, str, bool)) else None


def relevant(kind: str, key: str) -> bool:
    """Whether a run of `kind` reads `key` (a tuned key of another method's section is not its setting:
    runs/keys.py METHOD_KEYS, the rule the run's own label follows)."""
    return not matches(key, unread_keys(kind))


def setting_of(run: Run, tuned: Sequence[str]) -> dict[str, Any]:
    """The run's values of the tuned keys that apply to its kind and are known."""
    parts = label_parts(run.label)
    out = {}
    for key in tuned:
        if not relevant(run.run_kind, key):
            continue
        value = typed(parts[key]) if key in parts else _config_value(run, key)
        if value is not None:
            out[key] = value
    return out


def arm_label(label: str, tuned: Sequence[str]) -> str:
    """The label minus seed, train.budget and the tuned keys (its order kept: sorted by key)."""
    drop = set(tuned) | {BUDGET_KEY, SEED_KEY}
    if label in ("", "default"):
        return ""
    return ",".join(p for p in label_overrides(label) if override_key(p) not in drop)


@dataclass
class Arm:
    run_kind: str
    label: str  # arm_label: the configurations' labels minus the tuned keys and train.budget
    configs: list[Configuration]
    tuned: tuple[str, ...]
    name: str = ""
    selection_seeds: list = field(default_factory=list)
    selected: Optional[Configuration] = None  # the kept setting at the arm's largest budget
    selected_by_budget: dict[float, Configuration] = field(default_factory=dict)
    optimistic: bool = True  # selected on the seeds that also measure it
    note: Optional[str] = None  # why the selection is not what was asked for

    def setting(self, config: Configuration) -> dict[str, Any]:
        return setting_of(config.runs[0], self.tuned)

    @property
    def settings_tried(self) -> int:
        return len({_frozen(self.setting(c)) for c in self.configs})

    @property
    def eval_runs(self) -> list[Run]:
        """The runs that measure the arm: its kept setting's runs on seeds it was not selected on (on
        every seed when optimistic)."""
        if self.selected is None:
            return []
        if self.optimistic:
            return list(self.selected.runs)
        return [r for r in self.selected.runs if r.seed not in self.selection_seeds]


def _frozen(setting: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in setting.items()))


def group_arms(configs: Iterable[Configuration], tuned: Sequence[str]) -> list[Arm]:
    arms: dict[tuple[str, str], Arm] = {}
    for c in configs:
        key = (c.run_kind, arm_label(c.label, tuned))
        arms.setdefault(key, Arm(key[0], key[1], [], tuple(tuned))).configs.append(c)
    return list(arms.values())


def _mean_loss(config: Configuration, seeds: Optional[Iterable]) -> Optional[float]:
    wanted = None if seeds is None else set(seeds)
    finals = [r.final("val") for r in config.runs if wanted is None or r.seed in wanted]
    losses = [x for x in finals if x is not None]
    return float(np.mean(losses)) if losses else None


def select(arm: Arm, select_seeds: Optional[Sequence]) -> None:
    """Keep, per budget, the setting with the lowest mean final val loss on the selection seeds."""
    seeds = {r.seed for c in arm.configs for r in c.runs}
    chosen = [s for s in (select_seeds or []) if s in seeds]
    arm.optimistic = not chosen
    if select_seeds and not chosen:
        arm.note = "no run on a selection seed: selected on all its seeds (optimistic)"
    arm.selection_seeds = sorted(chosen if chosen else seeds, key=str)
    by_budget: dict[float, list[tuple[float, int, Configuration]]] = {}
    for i, c in enumerate(arm.configs):
        score = _mean_loss(c, chosen or None)
        if score is not None:
            by_budget.setdefault(c.budget, []).append((score, i, c))
    arm.selected_by_budget = {b: min(v, key=lambda t: t[:2])[2] for b, v in sorted(by_budget.items())}
    arm.selected = arm.selected_by_budget[max(arm.selected_by_budget)] if arm.selected_by_budget else None


def distinct_values(configs: Iterable[Configuration], key: str) -> list:
    """The values of `key` among the configurations it applies to (NOT_SET where unknown)."""
    values = []
    for c in configs:
        if relevant(c.run_kind, key):
            v = setting_of(c.runs[0], (key,)).get(key, NOT_SET)
            if v not in values:
                values.append(v)
    return values


def tuning_warnings(arms: list[Arm], configs: list[Configuration], extra_tuned: Sequence[str]) -> list[str]:
    """The baseline untuned (loudly, first), arms tuned unequally, --tune keys no run varies."""
    out = []
    singles = [c for c in configs if c.run_kind == RunKind.single]
    lrs = distinct_values(singles, "optim.lr")
    if singles and len(lrs) == 1:
        out.append(f"THE BASELINE WAS NOT TUNED: every single-level run has optim.lr {lrs[0]}; "
                   "this verdict assumes its LR is optimal")
    tried = {a.name: a.settings_tried for a in arms}
    if len(set(tried.values())) > 1:
        out.append("the arms were tuned unequally (settings tried: "
                   + "; ".join(f"{name} {n}" for name, n in tried.items()) + ")")
    for key in extra_tuned:
        values = distinct_values(configs, key)
        if len(values) <= 1:
            seen = f" (every run: {values[0]})" if values else " (no run it applies to)"
            out.append(f"--tune {key}: no run varies it{seen}")
    return out + [w for arm in arms for w in edge_warnings(arm)]


def edge_warnings(arm: Arm) -> list[str]:
    """A kept value at the end of the numbers its arm tried: the best may lie beyond the grid, so the arm
    may be under-tuned (a grid that brackets its best value says it is not)."""
    if arm.selected is None:
        return []
    kept, out = arm.setting(arm.selected), []
    for key, value in kept.items():
        tried = sorted({v for c in arm.configs if isinstance(v := arm.setting(c).get(key), (int, float))
                        and not isinstance(v, bool)})
        if len(tried) >= 2 and value in (tried[0], tried[-1]):
            side = "lowest" if value == tried[0] else "highest"
            out.append(f"{arm.name}: kept {key}={value}, the {side} of the values tried ({', '.join(map(str, tried))}): "
                       "its best may lie beyond them (the arm may be under-tuned)")
    return out
