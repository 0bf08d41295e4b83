"""The study's ladder as typed results (ladder.json): a `Ladder` of `Rung`s, one per scale, each with one
`RungArm` per study arm (what the ladder keeps of compare's `Arm`) and what stage 1 tried and chose there
(`RungTuning`: per arm `ArmTuning`, with its `SettingLosses` and `RunnerUp`), and one `Trend` per arm
along the ladder's axis (its `Step`s, `Prediction`s and the rungs it left out, `ExcludedRung`).

Each is a `Jsonable` dataclass (mltrain/core/jsonable.py, as comparison.json's results are): its fields are
ladder.json's keys in their order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from mltrain.core.jsonable import Jsonable, key
from mltrain.tools.compare import Arm, FitError, Multiplier

# What a ladder keeps of each arm's verdict (the keys and values of comparison.json)
ROW_KEYS = ("settings_tried", "selected", "selected_by_budget", "final_val_loss", "multiplier", "saving_interpolated",
            "saving_wallclock", "eval_seeds", "within_fit_error", "verdict")


@dataclass(frozen=True)
class RungArm(Jsonable):
    """One study arm at one rung: its label in the verdict and the verdict's arm found for it (None: not
    in the verdict). `result` holds only what the ladder keeps of it (ROW_KEYS), written beside `found`."""

    arm: str
    label: Optional[str]
    result: Optional[Arm] = None

    @property
    def found(self) -> bool:
        return self.result is not None

    @classmethod
    def from_json(cls, row: Optional[dict[str, Any]]) -> RungArm:
        row = row or {}
        kept = Arm.from_json({k: row[k] for k in ROW_KEYS if k in row}) if row.get("found") else None
        return cls(str(row.get("arm", "")), row.get("label"), kept)

    def to_json(self) -> dict[str, Any]:
        verdict = self.result.to_json() if self.result is not None else None
        return {"arm": self.arm, "label": self.label, "found": self.found,
                **({k: verdict.get(k) for k in ROW_KEYS} if verdict is not None else {})}


@dataclass(frozen=True)
class SettingLosses(Jsonable):
    """One setting an arm tried on the selection seeds: its final val loss per seed (by the seed's text) and
    their mean (None: no seed of the selection seeds)."""

    setting: dict[str, Any]
    losses: dict[str, float] = field(default_factory=dict)
    mean: Optional[float] = None


@dataclass(frozen=True)
class RunnerUp(Jsonable):
    """An arm's second best setting after a near tie, and its M against the same frontier (None: none had)."""

    setting: dict[str, Any]
    multiplier: Optional[Multiplier] = None


def _controlled(t: ArmTuning) -> bool:
    return t.control_selection_losses is not None


def _chose(t: ArmTuning) -> bool:
    return t.setting is not None


@dataclass(frozen=True)
class ArmTuning(Jsonable):
    """What one study arm tried at a rung (the pilots that fixed its grid counted in), every setting's
    selection losses, and what it chose; the frontier's arm with a schedule control counts the control's
    settings in (`control_settings_run`, `control_selection_losses`, written only then). `setting`,
    `by_budget` and `control_by_budget` are None (not written) where the arm chose nothing."""

    pilots: int
    settings_run: int
    settings_tried: int
    selection_losses: tuple[SettingLosses, ...] = ()
    control_settings_run: Optional[int] = key(default=None, when=_controlled)
    control_selection_losses: Optional[tuple[SettingLosses, ...]] = key(default=None, when=_controlled)
    setting: Optional[dict[str, Any]] = key(default=None, when=_chose)
    by_budget: Optional[dict[str, dict[str, Any]]] = key(default=None, when=_chose)
    control_by_budget: Optional[dict[str, dict[str, Any]]] = key(default=None, when=_chose)
    runner_up: Optional[RunnerUp] = key(default=None, omit_none=True)


@dataclass(frozen=True)
class RungTuning(Jsonable):
    """Stage 1 at one rung, as the study records it: the frontier's budgets, the selection seeds, and per
    study arm what it tried and chose."""

    frontier_budgets: tuple[str, ...] = ()
    selection_seeds: tuple = ()
    arms: dict[str, ArmTuning] = field(default_factory=dict)


@dataclass(frozen=True)
class Rung(Jsonable):
    """One scale of the ladder: its size, each study arm's verdict there (`verdict`: "comparison.json", or
    None with `why_no_verdict`), the verdict's warnings and fit error, the runs that did not end; `tuning`
    (what stage 1 tried and chose) when the study records it."""

    scale: str
    x: float
    n_params: int
    max_steps: int
    tokens_per_param: float
    arms: tuple[RungArm, ...] = ()
    verdict: Optional[str] = None
    why_no_verdict: Optional[str] = None
    warnings: tuple[str, ...] = ()
    fit_error: Optional[FitError] = None
    optimistic: Optional[bool] = None
    missing_runs: tuple[str, ...] = ()
    tuning: Optional[RungTuning] = None  # written only where the ladder records tuning (Ladder.with_tuning)

    @property
    def has_verdict(self) -> bool:
        return self.verdict is not None


@dataclass(frozen=True)
class Prediction(Jsonable):
    """M at a larger size on a trend's fitted line, with its interval: an extrapolation beyond the ladder."""

    n_params: float
    M: float
    M_lo: float
    M_hi: float
    beyond_largest: float  # n_params over the largest rung's


@dataclass(frozen=True)
class ExcludedRung(Jsonable):
    """A rung left out of a trend's points (its M only a bound, its interval unbounded, too few seeds): its
    value on the ladder's axis and why."""

    x: float
    why: str


@dataclass(frozen=True)
class Step(Jsonable):
    """Between two neighbouring rungs of a trend: the change in log M, its standard error, and the word:
    "up" or "down" where the change is at least twice its standard error, else "unresolved"."""

    x_from: float
    x_to: float
    diff: float
    se: float
    word: str


def _fitted(t: Trend) -> bool:
    return t.slope is not None


def _unfitted(t: Trend) -> bool:
    return t.slope is None


@dataclass(frozen=True, kw_only=True)
class Trend(Jsonable):
    """One arm's trend along the ladder's axis: the slope of log M against log x with its interval (none
    where too few rungs tell: `why` says so), the first-to-last contrast with its interval, each step
    between neighbouring rungs (`steps`), its word (`verdict`), its sentence and its predictions; the
    rungs left out as points (`excluded`: x and why). Fields in ladder.json's order: the fitted line's
    and `steps` only with a slope, `why` only without."""

    arm: str
    n_scales: int = 0
    excluded: tuple[ExcludedRung, ...] = ()
    slope: Optional[float] = key(default=None, when=_fitted)
    slope_lo: Optional[float] = key(default=None, when=_fitted)
    slope_hi: Optional[float] = key(default=None, when=_fitted)
    intercept: Optional[float] = key(default=None, when=_fitted)
    cov: Optional[list] = key(default=None, when=_fitted)
    quantile: Optional[float] = key(default=None, when=_fitted)
    method: Optional[str] = key(default=None, when=_fitted)
    n_min: Optional[float] = key(default=None, when=_fitted)
    n_max: Optional[float] = key(default=None, when=_fitted)
    n_draws: Optional[int] = key(default=None, when=_fitted)
    monotone: Optional[str] = key(default=None, when=_fitted)
    dof: Optional[float] = key(default=None, when=_fitted)  # the t quantile's (Satterthwaite; None: a normal)
    contrast: Optional[float] = key(default=None, when=_fitted)  # log M_last − log M_first, with its interval
    contrast_lo: Optional[float] = key(default=None, when=_fitted)
    contrast_hi: Optional[float] = key(default=None, when=_fitted)
    steps: tuple[Step, ...] = key(default=(), when=_fitted)
    verdict: str
    why: Optional[str] = key(default=None, when=_unfitted)
    sentence: str = ""
    predictions: tuple[Prediction, ...] = ()


@dataclass(frozen=True)
class Ladder(Jsonable):
    """The study's ladder report: per rung each arm's verdict, per arm its trend along the ladder's axis."""

    study: str
    axis: str
    axis_label: str
    frontier_arm: str
    flat_slope: float
    min_scales_for_trend: int
    min_seeds_for_trend: int
    rungs: tuple[Rung, ...] = key("scales", default=())
    trends: tuple[Trend, ...] = ()
    # each rung's `tuning` is written (the study records it); no key of its own: read from the rungs
    with_tuning: bool = key(default=False, when=lambda _: False)

    @classmethod
    def from_json(cls, entry: Optional[dict[str, Any]]) -> Ladder:
        ladder = super().from_json(entry)  # the shape checked first (ShapeError): then `scales` is a list of objects
        scales = (entry or {}).get("scales") or ()
        return replace(ladder, with_tuning=any("tuning" in s for s in scales))

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if not self.with_tuning:
            for rung in out["scales"]:
                del rung["tuning"]
        return out
