"""The verdict as typed results: what mltrain-compare computes, what it writes (comparison.json), what a
consumer of it (the study's ladder, a script) reads, and what its Markdown is rendered from.

    from mltrain.tools.compare import compare_report
    report = compare_report(["multirun/"], select_seeds=[0])   # a Report
    for arm in report.arms:
        print(arm.label, arm.multiplier.M, arm.multiplier.bound)

`Report` holds the arms (`Arm`: the setting kept, its final loss, its compute multiplier `Multiplier` with
the `Headline` it leads with, its savings read on the frontier's points, one `RunReading` per run) and the
tuned single-level `Frontier` (its points, the power law fitted to them and that fit's own error
`FitError`, its envelopes, its tuning space and what each dimension of it gained); the per-configuration
tables of `analysis` are typed in `tables`. Each class is a `Jsonable` dataclass whose fields are
comparison.json's keys in their order (mltrain/core/jsonable.py), read back from a file an earlier version wrote too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from mltrain.core.jsonable import Jsonable, key
from mltrain.tools.compare.tables import (Baseline, BootstrapRecord, ConfigurationRow, ConfigVerdict, FixedFlops, HeldOut,
                                          LeftOut, Outputs, Outside, UncountedCost, VsFrontier, VsReference)


@dataclass(frozen=True)
class Bound(Jsonable):
    """An arm whose equal-loss point lies beyond the frontier's data: only M > value is known."""

    kind: str  # "lower"
    value: Optional[float]
    what: Optional[str] = None


@dataclass(frozen=True)
class Headline(Jsonable):
    """The M a report leads with: `kind` bound, interpolated, joint or per_run, with its interval, the
    standard error of its log M and the degrees of freedom of its t quantile (what the ladder's trend
    weighs a rung by; None for a bound or a report written before them), over `n` runs."""

    kind: str
    M: Optional[float]
    M_lo: Optional[float]
    M_hi: Optional[float]
    M_hi_unbounded: bool = False
    log_se: Optional[float] = None
    dof: Optional[int] = None
    n: Optional[int] = None


@dataclass(frozen=True)
class DataReading(Jsonable):
    """An arm's M read on the frontier's own points, no curve (compare/ondata.py): `kind` "interpolated"
    (every run inside: M with a t interval on log M), "bound" (beyond the data with confidence: M > M_lo,
    a lower confidence limit) or None (neither: `why`); how many runs lay below the frontier's longest
    budget and above its shortest; the upper confidence limit of the mean loss gap to the frontier's
    lowest point (< 0: beyond); the lower confidence limit of M with runs beyond counted at C_max / C_run."""

    kind: Optional[str]
    why: Optional[str] = None
    M: Optional[float] = None
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    log_se: Optional[float] = None
    dof: Optional[int] = None
    n: int = 0
    n_below: int = 0
    n_above: int = 0
    gap_upper: Optional[float] = None
    lower_limit: Optional[float] = None


@dataclass(frozen=True)
class Multiplier(Jsonable):
    """An arm's compute multiplier M (the frontier's FLOPs for the same held-out loss over the arm's): the
    per-run reading's with its bootstrap interval, the joint fit's, the one read on the frontier's points,
    a bound beyond the data, and the M the report leads with (`headline`)."""

    available: bool
    why: Optional[str] = None
    M: Optional[float] = None
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    saving: Optional[float] = None
    saving_lo: Optional[float] = None
    saving_hi: Optional[float] = None
    extrapolated: bool = False
    beyond_data: Optional[float] = None  # how far past the frontier's FLOPs the fitted curve was read
    n: int = 0
    n_resamples: int = 0
    warnings: tuple[str, ...] = ()
    bound: Optional[Bound] = None
    M_hi_unbounded: bool = False
    n_degenerate: int = 0
    M_joint: Optional[float] = None
    M_joint_lo: Optional[float] = None
    M_joint_hi: Optional[float] = None
    M_joint_hi_unbounded: bool = False
    # with `draws` (the bootstrap's M per draw): only when the bootstrap gave an interval
    degenerate_share: Optional[float] = key(default=None, when=lambda m: m.draws is not None)
    draws: Optional[tuple[float, ...]] = key("bootstrap_M", default=None, omit_none=True)
    M_interpolated: Optional[float] = None
    fit_disagrees: bool = False
    headline: Optional[Headline] = None
    on_data: Optional[DataReading] = None  # the reading on the frontier's points (ondata.py)

    @classmethod
    def unavailable(cls, why: str) -> "Multiplier":
        return cls(False, why)

    @property
    def past_the_data(self) -> bool:
        """The arm's equal-loss point lies beyond the frontier's data: read off the fitted curve past its
        largest budget, or only a bound."""
        return self.extrapolated or bool(self.beyond_data) or (self.bound is not None and self.bound.kind == "lower")

    def led_by(self) -> Headline:
        """The headline M, or the per-run M where the report has none (one written before headlines)."""
        return self.headline or Headline("per_run", self.M, self.M_lo, self.M_hi, self.M_hi_unbounded)


@dataclass(frozen=True)
class BudgetReading(Jsonable):
    """The fitted frontier read at one configuration's points at one FLOPs (geometric mean over `n` seeds;
    a report written before them has no flops, label or kind)."""

    budget: Any
    M: float
    n: int
    flops: Optional[float] = None
    label: Optional[str] = None
    run_kind: Optional[str] = None


FIT_ERROR_WHAT = ("M of the frontier's own points on its fit, per configuration and FLOPs point (geometric mean over "
                  "the evaluation seeds); 1 everywhere for a perfect fit")


@dataclass(frozen=True)
class FitError(Jsonable):
    """The fitted frontier read at its own points: M there, which a perfect fit puts at 1 everywhere."""

    available: bool
    why: Optional[str] = None
    per_budget: tuple[BudgetReading, ...] = ()
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    what: str = FIT_ERROR_WHAT

    @property
    def band(self) -> Optional[float]:
        """The error as a half-width in log M (the widest of its per-budget readings), or None."""
        if not self.available or self.M_lo is None or self.M_hi is None:
            return None
        return max(abs(math.log(self.M_lo)), abs(math.log(self.M_hi)))

    def holds(self, m: "Multiplier") -> Optional[bool]:
        """Whether an arm's headline M lies inside this error (None: no M, only a bound, or no error)."""
        head = m.led_by()
        if head.kind == "bound" or head.M is None or not self.available or self.M_lo is None or self.M_hi is None:
            return None
        return bool(self.M_lo <= head.M <= self.M_hi)


@dataclass(frozen=True)
class PowerLawFit(Jsonable):
    """The power law L(C) = E + A·C^(−α) fitted to the frontier's points (powerlaw.Fit.as_result)."""

    available: bool
    why: Optional[str] = None
    E: Optional[float] = None
    A: Optional[float] = None
    alpha: Optional[float] = None
    loss: Optional[str] = None
    n_points: int = 0
    rms_log_residual: Optional[float] = None
    degenerate: Optional[str] = None
    flop_range: Optional[tuple[float, float]] = None


@dataclass(frozen=True)
class WithoutControl(Jsonable):
    """The frontier built without the schedule control's runs (the control's own M is read on it)."""

    fit: PowerLawFit
    fit_error: FitError
    n_points: int


@dataclass(frozen=True)
class FrontierRun(Jsonable):
    """One point of the frontier (a seed's envelope); `settings`: the tuned keys and train.budget."""

    seed: Any
    flops: float
    loss: float
    run_kind: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    run: str = ""


@dataclass(frozen=True)
class ConfigurationMean(Jsonable):
    """One single-level configuration of the frontier, its means over the evaluation seeds it has."""

    label: str
    name: str
    budget: Any
    seeds: tuple = ()
    mean_flops: Optional[float] = None
    mean_final_val_loss: Optional[float] = None


@dataclass(frozen=True)
class EnvelopePoint(Jsonable):
    """A point of a lower envelope."""

    flops: float
    final_val_loss: float
    budget: Any = None


@dataclass(frozen=True)
class SeedEnvelope(Jsonable):
    """One evaluation seed's lower envelope."""

    seed: Any
    points: tuple[EnvelopePoint, ...] = ()


@dataclass(frozen=True)
class WallclockFrontier(Jsonable):
    """The frontier's wall-clock twin."""

    available: bool
    why: Optional[str] = None
    time_basis: Optional[str] = None


@dataclass(frozen=True)
class TriedSetting(Jsonable):
    """One single-level setting tried at a budget (`family`: its schedule)."""

    name: str
    run_kind: str
    family: str
    settings: dict[str, Any] = field(default_factory=dict)
    selection_loss: Optional[float] = None
    kept: bool = False
    on_frontier: bool = False


@dataclass(frozen=True)
class BudgetTried(Jsonable):
    """Every single-level setting tried at one budget."""

    budget: Any
    settings: tuple[TriedSetting, ...] = ()


@dataclass(frozen=True)
class GainReading(Jsonable):
    """An arm's M against a restricted frontier: a point reading, or only a bound (M > bound) where its data
    decide one; `kind` which reading leads, as a headline's: "interpolated", "joint", "per_run", "bound"
    (beyond the data with confidence) or "data_only_bound"; None with no reading. An interpolated reading
    has its headline's 95% interval, the standard error of its log M and its t quantile's degrees of
    freedom (what sets two arms against the same frontier, e.g. an arm over the schedule control)."""

    M: Optional[float] = None
    bound: Optional[float] = None
    kind: Optional[str] = None
    M_lo: Optional[float] = key(default=None, omit_none=True)
    M_hi: Optional[float] = key(default=None, omit_none=True)
    log_se: Optional[float] = key(default=None, omit_none=True)
    dof: Optional[int] = key(default=None, omit_none=True)


@dataclass(frozen=True)
class Gain(Jsonable):
    """What one dimension of the frontier's tuning added (dimensions.py), each measured arm's M by name."""

    dimension: str
    restricted_to: str
    n_points: int = 0
    fit_available: bool = False
    why: Optional[str] = None
    gain_M: Optional[float] = None
    arms: dict[str, GainReading] = field(default_factory=dict)


@dataclass(frozen=True)
class Frontier(Jsonable):
    """The tuned single-level frontier (frontier.py), its fit and tuning space."""

    available: bool = False
    why: Optional[str] = None
    built_from: str = ""
    seeds: tuple = ()
    points: tuple[FrontierRun, ...] = ()
    fit: Optional[PowerLawFit] = None
    budgets: tuple = ()
    configurations: tuple[ConfigurationMean, ...] = ()
    mean_envelope: Optional[tuple[EnvelopePoint, ...]] = None
    per_seed_envelope: tuple[SeedEnvelope, ...] = ()
    dominated_budgets: tuple = ()
    wallclock: Optional[WallclockFrontier] = None
    fit_error: FitError = FitError(False)
    tried_per_budget: tuple[BudgetTried, ...] = ()
    gains: tuple[Gain, ...] = ()
    without_control: Optional[WithoutControl] = None


@dataclass(frozen=True)
class LossInterval(Jsonable):
    """An arm's final held-out loss over its evaluation seeds."""

    mean: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    n: int


@dataclass(frozen=True)
class Saving(Jsonable):
    """A saving read on the frontier's points, no curve: 1 − x_run / x*, with its interval over the runs
    inside the frontier (those outside its ends counted in `n_outside`, below and above)."""

    available: bool
    why: Optional[str] = None
    saving: Optional[float] = None
    saving_lo: Optional[float] = None
    saving_hi: Optional[float] = None
    n: int = 0
    n_outside: Optional[Outside] = None
    n_unpaired: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class WallclockSaving(Saving):
    """The same saving on a wall-clock axis, with what time it read (`time_basis`)."""

    time_basis: Optional[str] = None

    @classmethod
    def reading(cls, saving: Saving, time_basis: Optional[str]) -> "WallclockSaving":
        """A saving read on a wall-clock axis, with the time it read."""
        return cls(**{f.name: getattr(saving, f.name) for f in fields(saving)}, time_basis=time_basis)


@dataclass(frozen=True)
class RunReading(Jsonable):
    """One evaluation run of an arm read on the fitted frontier."""

    seed: Any
    run: str
    flops: Optional[float]
    final_val_loss: Optional[float]
    flops_eq: Optional[float] = None
    M: Optional[float] = None
    extrapolated: bool = False
    beyond_data: Optional[float] = None


@dataclass(frozen=True)
class Arm(Jsonable):
    """One arm of the verdict: a method with its tuned keys left free, at the setting kept for it, measured on
    the evaluation seeds. `name` is its readable name (JSON "arm"), `label` the runs' label."""

    name: str = key("arm", default="")
    label: str = ""
    run_kind: str = ""
    settings_tried: int = 0
    selection_seeds: tuple = ()
    eval_seeds: tuple = ()
    optimistic: bool = False
    selected: Optional[dict[str, Any]] = None
    selected_label: Optional[str] = None
    final_val_loss: Optional[LossInterval] = None
    multiplier: Optional[Multiplier] = None
    saving_interpolated: Optional[Saving] = None
    saving_wallclock: Optional[WallclockSaving] = None
    is_frontier: bool = False  # the single-level arm: its settings are the frontier
    measured_against: str = ""
    within_fit_error: Optional[bool] = None
    verdict: str = ""
    runs: tuple[RunReading, ...] = ()
    # the single-level arm's setting per budget
    selected_by_budget: Optional[dict[str, dict[str, Any]]] = key(default=None, omit_none=True)

    @property
    def kept(self) -> dict[str, Any]:
        """The setting kept (empty when none was)."""
        return dict(self.selected or {})

    @property
    def kept_by_budget(self) -> dict[str, dict[str, Any]]:
        """The single-level arm's setting per budget (empty for any other arm)."""
        return dict(self.selected_by_budget or {})


@dataclass(frozen=True)
class Report(Jsonable):
    """mltrain-compare's verdict: its arms, its frontier, what it warns of, and whether it is optimistic
    (a setting chosen on the seeds that measure it); beside them how it was made and analysis's
    per-configuration tables (`configurations`, `vs_baseline`, ..., `verdicts`: the JSON "verdict")."""

    command: str = ""
    smooth: Optional[int] = None
    smoothing: str = ""
    pairing: str = ""
    interval_method: str = ""
    std: str = ""
    tuned_keys: tuple[str, ...] = ()
    select_seeds: Optional[list] = None
    optimistic: Optional[bool] = None
    bootstrap: Optional[BootstrapRecord] = None
    warnings: tuple[str, ...] = ()
    arms: tuple[Arm, ...] = ()
    frontier: Frontier = Frontier()
    excluded: tuple[LeftOut, ...] = ()
    baseline: Optional[Baseline] = None
    configurations: tuple[ConfigurationRow, ...] = ()
    vs_baseline: tuple[VsReference, ...] = ()
    vs_control: tuple[VsReference, ...] = ()
    vs_frontier: tuple[VsFrontier, ...] = ()
    fixed_flops: Optional[FixedFlops] = None
    held_out: Optional[HeldOut] = None
    uncounted_costs: tuple[UncountedCost, ...] = ()
    verdicts: tuple[ConfigVerdict, ...] = key("verdict", default=())
    common_settings: Optional[dict] = None  # key -> value every configuration has (left out of their names)
    outputs: Optional[Outputs] = None
