"""The verdict as typed results: what mltrain-compare computes, what it writes (comparison.json), what a
consumer of it (the study's ladder, a script) reads, and what its Markdown is rendered from.

    from mltrain.tools.compare import compare_report
    report = compare_report(["multirun/"], select_seeds=[0])   # a Report
    for arm in report.arms:
        print(arm.label, arm.multiplier.M, arm.multiplier.bound)

`Report` holds the arms (`Arm`: the setting kept, the evaluation seeds, the final loss `LossInterval`, the
compute multiplier `Multiplier` with its `Headline` and `Bound`, the savings read on the frontier's
points `Saving`, one `RunReading` per run) and the frontier (`Frontier`: its points `FrontierRun`, the
power law fitted to them `PowerLawFit`, its fit's own error `FitError`, its configurations' means
`ConfigurationMean`, its envelopes `SeedEnvelope` of `EnvelopePoint`s, its wall-clock twin
`WallclockFrontier`, the settings it tried per budget `BudgetTried` of `TriedSetting`s, what each tuning
dimension gained `Gain` with each arm's `GainReading`, and `WithoutControl`).
The study's ladder is a `Ladder` of `Rung`s, one per scale, each with one `RungArm` per study arm and
what stage 1 tried and chose there (`RungTuning`: per arm `ArmTuning`, with its `SettingLosses` and
`RunnerUp`), and one `Trend` per arm along the ladder's axis (with its `Prediction`s and the rungs it
left out, `ExcludedRung`).

JSON: each class writes its object with `to_json`, in comparison.json's (and ladder.json's) keys and key
order; `from_json` reads one back, also one written by an earlier mltrain-compare (a key it lacks takes
its neutral value: no bound, no headline, no draws). The per-configuration tables of `analysis` (against
the one baseline, the control and the frontier's points; at fixed FLOPs; ...) are typed in `tables`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from mltrain.tools.compare.tables import (Baseline, BootstrapRecord, ConfigurationRow, ConfigVerdict, FixedFlops, HeldOut,
                                          LeftOut, Outputs, Outside, UncountedCost, VsFrontier, VsReference)
from mltrain.tools.compare.tables import json_value as _json
from mltrain.tools.compare.tables import listed
from mltrain.tools.compare.tables import optional as _or_none


@dataclass(frozen=True)
class Bound:
    """An arm whose equal-loss point lies beyond the frontier's data: only M > value is known."""

    kind: str  # "lower"
    value: Optional[float]
    what: Optional[str] = None

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> Optional["Bound"]:
        if not entry or not entry.get("kind"):
            return None
        return cls(str(entry["kind"]), entry.get("value"), entry.get("what"))

    def to_json(self) -> dict:
        return {"kind": self.kind, "value": self.value, "what": self.what}


@dataclass(frozen=True)
class Headline:
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

    @classmethod
    def from_json(cls, entry: dict) -> "Headline":
        return cls(str(entry["kind"]), entry.get("M"), entry.get("M_lo"), entry.get("M_hi"),
                   bool(entry.get("M_hi_unbounded")), entry.get("log_se"), entry.get("dof"), entry.get("n"))

    def to_json(self) -> dict:
        return {"kind": self.kind, "M": self.M, "M_lo": self.M_lo, "M_hi": self.M_hi,
                "M_hi_unbounded": self.M_hi_unbounded, "log_se": self.log_se, "dof": self.dof, "n": self.n}


@dataclass(frozen=True)
class DataReading:
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

    @classmethod
    def from_json(cls, e: dict) -> "DataReading":
        return cls(e.get("kind"), e.get("why"), e.get("M"), e.get("M_lo"), e.get("M_hi"), e.get("log_se"),
                   e.get("dof"), e.get("n") or 0, e.get("n_below") or 0, e.get("n_above") or 0, e.get("gap_upper"),
                   e.get("lower_limit"))

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Multiplier:
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
    degenerate_share: Optional[float] = None  # with `draws`: only when the bootstrap gave an interval
    draws: Optional[tuple[float, ...]] = None  # the bootstrap's M per draw (bootstrap_M)
    M_interpolated: Optional[float] = None
    fit_disagrees: bool = False
    headline: Optional[Headline] = None
    on_data: Optional[DataReading] = None  # the reading on the frontier's points (ondata.py)

    @classmethod
    def unavailable(cls, why: str) -> "Multiplier":
        return cls(False, why)

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "Multiplier":
        e = entry or {}
        draws = e.get("bootstrap_M")
        return cls(bool(e.get("available")), e.get("why"), e.get("M"), e.get("M_lo"), e.get("M_hi"), e.get("saving"),
                   e.get("saving_lo"), e.get("saving_hi"), bool(e.get("extrapolated")), e.get("beyond_data"),
                   e.get("n") or 0, e.get("n_resamples") or 0, tuple(e.get("warnings") or ()),
                   Bound.from_json(e.get("bound")), bool(e.get("M_hi_unbounded")), e.get("n_degenerate") or 0,
                   e.get("M_joint"), e.get("M_joint_lo"), e.get("M_joint_hi"), bool(e.get("M_joint_hi_unbounded")),
                   e.get("degenerate_share"), tuple(draws) if draws is not None else None, e.get("M_interpolated"),
                   bool(e.get("fit_disagrees")), _or_none(e.get("headline"), Headline),
                   _or_none(e.get("on_data"), DataReading))

    def to_json(self) -> dict:
        out = {"available": self.available, "why": self.why, "M": self.M, "M_lo": self.M_lo, "M_hi": self.M_hi,
               "saving": self.saving, "saving_lo": self.saving_lo, "saving_hi": self.saving_hi,
               "extrapolated": self.extrapolated, "beyond_data": self.beyond_data, "n": self.n,
               "n_resamples": self.n_resamples, "warnings": list(self.warnings), "bound": _json(self.bound),
               "M_hi_unbounded": self.M_hi_unbounded, "n_degenerate": self.n_degenerate, "M_joint": self.M_joint,
               "M_joint_lo": self.M_joint_lo, "M_joint_hi": self.M_joint_hi,
               "M_joint_hi_unbounded": self.M_joint_hi_unbounded}
        if self.draws is not None:
            out.update(degenerate_share=self.degenerate_share, bootstrap_M=list(self.draws))
        out.update(M_interpolated=self.M_interpolated, fit_disagrees=self.fit_disagrees, headline=_json(self.headline),
                   on_data=_json(self.on_data))
        return out

    @property
    def measured(self) -> bool:
        """A positive M to read (available, not zero)."""
        return self.available and bool(self.M) and self.M > 0

    @property
    def past_the_data(self) -> bool:
        """The arm's equal-loss point lies beyond the frontier's data: read off the fitted curve past its
        largest budget, or only a bound."""
        return self.extrapolated or bool(self.beyond_data) or (self.bound is not None and self.bound.kind == "lower")

    def led_by(self) -> Headline:
        """The headline M, or the per-run M where the report has none (one written before headlines)."""
        return self.headline or Headline("per_run", self.M, self.M_lo, self.M_hi, self.M_hi_unbounded)


@dataclass(frozen=True)
class BudgetReading:
    """The fitted frontier read at its own points of one configuration at one FLOPs: M there (geometric
    mean over `n` seeds); the configuration's budget, label and kind (a report written before them has
    only the budget)."""

    budget: Any
    M: float
    n: int
    flops: Optional[float] = None
    label: Optional[str] = None
    run_kind: Optional[str] = None

    @classmethod
    def from_json(cls, entry: dict) -> "BudgetReading":
        return cls(entry.get("budget"), entry.get("M"), entry.get("n") or 0, entry.get("flops"), entry.get("label"),
                   entry.get("run_kind"))

    def to_json(self) -> dict:
        return {"budget": self.budget, "M": self.M, "n": self.n, "flops": self.flops, "label": self.label,
                "run_kind": self.run_kind}


FIT_ERROR_WHAT = ("M of the frontier's own points on its fit, per configuration and FLOPs point (geometric mean over "
                  "the evaluation seeds); 1 everywhere for a perfect fit")


@dataclass(frozen=True)
class FitError:
    """The fitted frontier read at its own points: M there, which a perfect fit puts at 1 everywhere."""

    available: bool
    why: Optional[str] = None
    per_budget: tuple[BudgetReading, ...] = ()
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    what: str = FIT_ERROR_WHAT

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "FitError":
        e = entry or {}
        return cls(bool(e.get("available")), e.get("why"), tuple(BudgetReading.from_json(b) for b in e.get("per_budget") or ()),
                   e.get("M_lo"), e.get("M_hi"), e.get("what", FIT_ERROR_WHAT))

    def to_json(self) -> dict:
        return {"available": self.available, "why": self.why, "per_budget": _json(self.per_budget),
                "M_lo": self.M_lo, "M_hi": self.M_hi, "what": self.what}

    @property
    def band(self) -> Optional[float]:
        """The error as a half-width in log M (the widest of its per-budget readings), or None."""
        if not self.available:
            return None
        return max(abs(math.log(self.M_lo)), abs(math.log(self.M_hi)))

    def holds(self, m: "Multiplier") -> Optional[bool]:
        """Whether an arm's headline M lies inside this error (None: no M, only a bound, or no error)."""
        head = m.led_by()
        if head.kind == "bound" or head.M is None or not self.available:
            return None
        return bool(self.M_lo <= head.M <= self.M_hi)


@dataclass(frozen=True)
class PowerLawFit:
    """The power law L(C) = E + A·C^(−α) fitted to the frontier's points (powerlaw.Fit.result): whether it
    is usable (`why` not), its parameters, the loss it was fitted with, how far its points lie off it
    (rms of the log residuals), why it says little beyond them (`degenerate`) and its FLOPs range."""

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

    @classmethod
    def from_json(cls, e: dict) -> "PowerLawFit":
        span = e.get("flop_range")
        return cls(bool(e.get("available")), e.get("why"), e.get("E"), e.get("A"), e.get("alpha"), e.get("loss"),
                   e.get("n_points") or 0, e.get("rms_log_residual"), e.get("degenerate"),
                   tuple(span) if span is not None else None)

    def to_json(self) -> dict:
        return {"available": self.available, "why": self.why, "E": self.E, "A": self.A, "alpha": self.alpha,
                "loss": self.loss, "n_points": self.n_points, "rms_log_residual": self.rms_log_residual,
                "degenerate": self.degenerate, "flop_range": list(self.flop_range) if self.flop_range else None}


@dataclass(frozen=True)
class WithoutControl:
    """The frontier built without the schedule control's runs (the control's own M is read on it)."""

    fit: PowerLawFit
    fit_error: FitError
    n_points: int

    @classmethod
    def from_json(cls, entry: dict) -> "WithoutControl":
        return cls(PowerLawFit.from_json(entry.get("fit") or {}), FitError.from_json(entry.get("fit_error")),
                   entry.get("n_points") or 0)

    def to_json(self) -> dict:
        return {"fit": self.fit.to_json(), "fit_error": self.fit_error.to_json(), "n_points": self.n_points}


@dataclass(frozen=True)
class FrontierRun:
    """One point of the frontier (a seed's envelope): the run there, its total FLOPs and final held-out loss,
    its kind, settings (the tuned keys and train.budget), readable name and folder."""

    seed: Any
    flops: float
    loss: float
    run_kind: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    run: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "FrontierRun":
        return cls(e.get("seed"), e.get("flops"), e.get("loss"), e.get("run_kind", ""), dict(e.get("settings") or {}),
                   e.get("name", ""), e.get("run", ""))

    def to_json(self) -> dict:
        return {"seed": self.seed, "flops": self.flops, "loss": self.loss, "run_kind": self.run_kind,
                "settings": self.settings, "name": self.name, "run": self.run}


@dataclass(frozen=True)
class ConfigurationMean:
    """One single-level configuration of the frontier: its mean total FLOPs and final val loss over the
    evaluation seeds it has finished runs on."""

    label: str
    name: str
    budget: Any
    seeds: tuple = ()
    mean_flops: Optional[float] = None
    mean_final_val_loss: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "ConfigurationMean":
        return cls(e.get("label", ""), e.get("name", ""), e.get("budget"), tuple(e.get("seeds") or ()),
                   e.get("mean_flops"), e.get("mean_final_val_loss"))

    def to_json(self) -> dict:
        return {"label": self.label, "name": self.name, "budget": self.budget, "seeds": list(self.seeds),
                "mean_flops": self.mean_flops, "mean_final_val_loss": self.mean_final_val_loss}


@dataclass(frozen=True)
class EnvelopePoint:
    """A point of a lower envelope: FLOPs, final val loss, the budget it comes from."""

    flops: float
    final_val_loss: float
    budget: Any = None

    @classmethod
    def from_json(cls, e: dict) -> "EnvelopePoint":
        return cls(e.get("flops"), e.get("final_val_loss"), e.get("budget"))

    def to_json(self) -> dict:
        return {"flops": self.flops, "final_val_loss": self.final_val_loss, "budget": self.budget}


@dataclass(frozen=True)
class SeedEnvelope:
    """One evaluation seed's lower envelope."""

    seed: Any
    points: tuple[EnvelopePoint, ...] = ()

    @classmethod
    def from_json(cls, e: dict) -> "SeedEnvelope":
        return cls(e.get("seed"), listed(e.get("points"), EnvelopePoint))

    def to_json(self) -> dict:
        return {"seed": self.seed, "points": _json(self.points)}


@dataclass(frozen=True)
class WallclockFrontier:
    """Whether the frontier has a wall-clock twin (why not), and the time it reads."""

    available: bool
    why: Optional[str] = None
    time_basis: Optional[str] = None

    @classmethod
    def from_json(cls, e: dict) -> "WallclockFrontier":
        return cls(bool(e.get("available")), e.get("why"), e.get("time_basis"))

    def to_json(self) -> dict:
        return {"available": self.available, "why": self.why, "time_basis": self.time_basis}


@dataclass(frozen=True)
class TriedSetting:
    """One single-level setting tried at a budget: its family (schedule), tuned values, mean selection loss,
    whether its arm kept it there and whether its runs are on the frontier's envelope."""

    name: str
    run_kind: str
    family: str
    settings: dict[str, Any] = field(default_factory=dict)
    selection_loss: Optional[float] = None
    kept: bool = False
    on_frontier: bool = False

    @classmethod
    def from_json(cls, e: dict) -> "TriedSetting":
        return cls(e.get("name", ""), e.get("run_kind", ""), e.get("family", ""), dict(e.get("settings") or {}),
                   e.get("selection_loss"), bool(e.get("kept")), bool(e.get("on_frontier")))

    def to_json(self) -> dict:
        return {"name": self.name, "run_kind": self.run_kind, "family": self.family, "settings": self.settings,
                "selection_loss": self.selection_loss, "kept": self.kept, "on_frontier": self.on_frontier}


@dataclass(frozen=True)
class BudgetTried:
    """Every single-level setting tried at one budget."""

    budget: Any
    settings: tuple[TriedSetting, ...] = ()

    @classmethod
    def from_json(cls, e: dict) -> "BudgetTried":
        return cls(e.get("budget"), listed(e.get("settings"), TriedSetting))

    def to_json(self) -> dict:
        return {"budget": self.budget, "settings": _json(self.settings)}


@dataclass(frozen=True)
class GainReading:
    """An arm's M against a restricted frontier: a point reading, or only a bound (M > bound) where its data
    decide one; `kind` which reading leads, as a headline's: "interpolated", "joint", "per_run", "bound"
    (beyond the data with confidence) or "data_only_bound"; None with no reading."""

    M: Optional[float] = None
    bound: Optional[float] = None
    kind: Optional[str] = None

    @classmethod
    def from_json(cls, e: dict) -> "GainReading":
        return cls(e.get("M"), e.get("bound"), e.get("kind"))

    def to_json(self) -> dict:
        return {"M": self.M, "bound": self.bound, "kind": self.kind}


@dataclass(frozen=True)
class Gain:
    """What one dimension of the frontier's tuning added: the frontier rebuilt without it (what it keeps,
    its points, its fit), the full frontier's gain on it, and each measured arm's M against it (by name)."""

    dimension: str
    restricted_to: str
    n_points: int = 0
    fit_available: bool = False
    why: Optional[str] = None
    gain_M: Optional[float] = None
    arms: dict[str, GainReading] = field(default_factory=dict)

    @classmethod
    def from_json(cls, e: dict) -> "Gain":
        return cls(e.get("dimension", ""), e.get("restricted_to", ""), e.get("n_points") or 0, bool(e.get("fit_available")),
                   e.get("why"), e.get("gain_M"), {str(k): GainReading.from_json(v) for k, v in (e.get("arms") or {}).items()})

    def to_json(self) -> dict:
        return {"dimension": self.dimension, "restricted_to": self.restricted_to, "n_points": self.n_points,
                "fit_available": self.fit_available, "why": self.why, "gain_M": self.gain_M,
                "arms": {k: v.to_json() for k, v in self.arms.items()}}


@dataclass(frozen=True)
class Frontier:
    """The tuned single-level frontier: its points (per seed, whatever each run's settings), the power law
    fitted to them (`fit`), its own error, and the tuning space it was built from."""

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

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "Frontier":
        e = entry or {}
        mean = e.get("mean_envelope")
        return cls(bool(e.get("available")), e.get("why"), e.get("built_from", ""), tuple(e.get("seeds") or ()),
                   listed(e.get("points"), FrontierRun), _or_none(e.get("fit"), PowerLawFit), tuple(e.get("budgets") or ()),
                   listed(e.get("configurations"), ConfigurationMean),
                   listed(mean, EnvelopePoint) if mean is not None else None,
                   listed(e.get("per_seed_envelope"), SeedEnvelope), tuple(e.get("dominated_budgets") or ()),
                   _or_none(e.get("wallclock"), WallclockFrontier), FitError.from_json(e.get("fit_error")),
                   listed(e.get("tried_per_budget"), BudgetTried), listed(e.get("gains"), Gain),
                   _or_none(e.get("without_control"), WithoutControl))

    def to_json(self) -> dict:
        return {"available": self.available, "why": self.why, "built_from": self.built_from, "seeds": list(self.seeds),
                "points": _json(self.points), "fit": _json(self.fit), "budgets": list(self.budgets),
                "configurations": _json(self.configurations), "mean_envelope": _json(self.mean_envelope),
                "per_seed_envelope": _json(self.per_seed_envelope), "dominated_budgets": list(self.dominated_budgets),
                "wallclock": _json(self.wallclock), "fit_error": self.fit_error.to_json(),
                "tried_per_budget": _json(self.tried_per_budget), "gains": _json(self.gains),
                "without_control": _json(self.without_control)}


@dataclass(frozen=True)
class LossInterval:
    """An arm's final held-out loss over its evaluation seeds: the mean and its interval."""

    mean: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    n: int

    @classmethod
    def from_json(cls, entry: dict) -> "LossInterval":
        return cls(entry.get("mean"), entry.get("lo"), entry.get("hi"), entry.get("n") or 0)

    def to_json(self) -> dict:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}


@dataclass(frozen=True)
class Saving:
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

    @classmethod
    def from_json(cls, e: dict) -> "Saving":
        return Saving(bool(e.get("available")), e.get("why"), e.get("saving"), e.get("saving_lo"), e.get("saving_hi"),
                      e.get("n") or 0, _or_none(e.get("n_outside"), Outside), e.get("n_unpaired") or 0,
                      tuple(e.get("warnings") or ()))

    def to_json(self) -> dict:
        return {"available": self.available, "why": self.why, "saving": self.saving, "saving_lo": self.saving_lo,
                "saving_hi": self.saving_hi, "n": self.n, "n_outside": _json(self.n_outside), "n_unpaired": self.n_unpaired,
                "warnings": list(self.warnings)}


@dataclass(frozen=True)
class WallclockSaving(Saving):
    """The same saving on a wall-clock axis, with what time it read (`time_basis`)."""

    time_basis: Optional[str] = None

    @classmethod
    def from_json(cls, entry: dict) -> "WallclockSaving":
        return cls.reading(Saving.from_json(entry), entry.get("time_basis"))

    @classmethod
    def reading(cls, saving: Saving, time_basis: Optional[str]) -> "WallclockSaving":
        """A saving read on a wall-clock axis, with the time it read."""
        return cls(**{f.name: getattr(saving, f.name) for f in fields(saving)}, time_basis=time_basis)

    def to_json(self) -> dict:
        return {**super().to_json(), "time_basis": self.time_basis}


@dataclass(frozen=True)
class RunReading:
    """One evaluation run of an arm read on the fitted frontier: the FLOPs there for its final loss, its M."""

    seed: Any
    run: str
    flops: Optional[float]
    final_val_loss: Optional[float]
    flops_eq: Optional[float] = None
    M: Optional[float] = None
    extrapolated: bool = False
    beyond_data: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "RunReading":
        return cls(e.get("seed"), e.get("run", ""), e.get("flops"), e.get("final_val_loss"), e.get("flops_eq"),
                   e.get("M"), bool(e.get("extrapolated")), e.get("beyond_data"))

    def to_json(self) -> dict:
        return {"seed": self.seed, "run": self.run, "flops": self.flops, "final_val_loss": self.final_val_loss,
                "flops_eq": self.flops_eq, "M": self.M, "extrapolated": self.extrapolated,
                "beyond_data": self.beyond_data}


@dataclass(frozen=True)
class Arm:
    """One arm of the verdict: a method with its tuned keys left free, at the setting kept for it, measured on
    the evaluation seeds. `name` is its readable name (JSON "arm"), `label` the runs' label."""

    name: str = ""
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
    selected_by_budget: Optional[dict[str, dict[str, Any]]] = None  # the single-level arm's setting per budget

    @classmethod
    def from_json(cls, e: dict) -> "Arm":
        by_budget = e.get("selected_by_budget")
        return cls(str(e.get("arm", "")), str(e.get("label", "")), str(e.get("run_kind") or ""), e.get("settings_tried") or 0,
                   tuple(e.get("selection_seeds") or ()), tuple(e.get("eval_seeds") or ()), bool(e.get("optimistic")),
                   e.get("selected"), e.get("selected_label"), _or_none(e.get("final_val_loss"), LossInterval),
                   _or_none(e.get("multiplier"), Multiplier), _or_none(e.get("saving_interpolated"), Saving),
                   _or_none(e.get("saving_wallclock"), WallclockSaving), bool(e.get("is_frontier")),
                   e.get("measured_against", ""), e.get("within_fit_error"), e.get("verdict", ""),
                   tuple(RunReading.from_json(r) for r in e.get("runs") or ()),
                   {str(b): dict(s) for b, s in by_budget.items()} if by_budget is not None else None)

    def to_json(self) -> dict:
        out = {"arm": self.name, "label": self.label, "run_kind": self.run_kind, "settings_tried": self.settings_tried,
               "selection_seeds": list(self.selection_seeds), "eval_seeds": list(self.eval_seeds),
               "optimistic": self.optimistic, "selected": self.selected, "selected_label": self.selected_label,
               "final_val_loss": _json(self.final_val_loss), "multiplier": _json(self.multiplier),
               "saving_interpolated": _json(self.saving_interpolated), "saving_wallclock": _json(self.saving_wallclock),
               "is_frontier": self.is_frontier, "measured_against": self.measured_against,
               "within_fit_error": self.within_fit_error, "verdict": self.verdict, "runs": _json(self.runs)}
        if self.selected_by_budget is not None:
            out["selected_by_budget"] = self.selected_by_budget
        return out

    @property
    def kept(self) -> dict[str, Any]:
        """The setting kept (empty when none was)."""
        return dict(self.selected or {})

    @property
    def kept_by_budget(self) -> dict[str, dict[str, Any]]:
        """The single-level arm's setting per budget (empty for any other arm)."""
        return dict(self.selected_by_budget or {})


# The report's top-level keys, in comparison.json's order, with the field each is held in.
_REPORT_KEYS = (("command", "command"), ("smooth", "smooth"), ("smoothing", "smoothing"), ("pairing", "pairing"),
                ("interval_method", "interval_method"), ("std", "std"), ("tuned_keys", "tuned_keys"),
                ("select_seeds", "select_seeds"), ("optimistic", "optimistic"), ("bootstrap", "bootstrap"),
                ("warnings", "warnings"), ("arms", "arms"), ("frontier", "frontier"), ("excluded", "excluded"),
                ("baseline", "baseline"), ("configurations", "configurations"), ("vs_baseline", "vs_baseline"),
                ("vs_control", "vs_control"), ("vs_frontier", "vs_frontier"), ("fixed_flops", "fixed_flops"),
                ("held_out", "held_out"), ("uncounted_costs", "uncounted_costs"), ("verdict", "verdicts"),
                ("common_settings", "common_settings"), ("outputs", "outputs"))


@dataclass(frozen=True)
class Report:
    """mltrain-compare's verdict: its arms, its frontier, what it warns of, and whether it is optimistic
    (a setting chosen on the seeds that measure it); beside them how it was made and analysis's
    per-configuration tables (`configurations`, `vs_baseline`, ..., `verdicts`: the JSON "verdict")."""

    arms: tuple[Arm, ...] = ()
    frontier: Frontier = Frontier()
    warnings: tuple[str, ...] = ()
    optimistic: Optional[bool] = None
    command: str = ""
    smooth: Optional[int] = None
    smoothing: str = ""
    pairing: str = ""
    interval_method: str = ""
    std: str = ""
    tuned_keys: tuple[str, ...] = ()
    select_seeds: Optional[list] = None
    bootstrap: Optional[BootstrapRecord] = None
    excluded: tuple[LeftOut, ...] = ()
    baseline: Optional[Baseline] = None
    configurations: tuple[ConfigurationRow, ...] = ()
    vs_baseline: tuple[VsReference, ...] = ()
    vs_control: tuple[VsReference, ...] = ()
    vs_frontier: tuple[VsFrontier, ...] = ()
    fixed_flops: Optional[FixedFlops] = None
    held_out: Optional[HeldOut] = None
    uncounted_costs: tuple[UncountedCost, ...] = ()
    verdicts: tuple[ConfigVerdict, ...] = ()
    common_settings: Optional[dict] = None  # key -> value every configuration has (left out of their names)
    outputs: Optional[Outputs] = None

    @classmethod
    def from_json(cls, report: dict) -> "Report":
        r = report
        return cls(tuple(Arm.from_json(a) for a in r.get("arms") or ()), Frontier.from_json(r.get("frontier")),
                   tuple(r.get("warnings") or ()), r.get("optimistic"), r.get("command", ""), r.get("smooth"),
                   r.get("smoothing", ""), r.get("pairing", ""), r.get("interval_method", ""), r.get("std", ""),
                   tuple(r.get("tuned_keys") or ()), r.get("select_seeds"), _or_none(r.get("bootstrap"), BootstrapRecord),
                   listed(r.get("excluded"), LeftOut), _or_none(r.get("baseline"), Baseline),
                   listed(r.get("configurations"), ConfigurationRow), listed(r.get("vs_baseline"), VsReference),
                   listed(r.get("vs_control"), VsReference), listed(r.get("vs_frontier"), VsFrontier),
                   _or_none(r.get("fixed_flops"), FixedFlops), _or_none(r.get("held_out"), HeldOut),
                   listed(r.get("uncounted_costs"), UncountedCost), listed(r.get("verdict"), ConfigVerdict),
                   r.get("common_settings"), _or_none(r.get("outputs"), Outputs))

    def to_json(self) -> dict:
        return {key: _json(getattr(self, name)) for key, name in _REPORT_KEYS}


# ---------------------------------------------------------------------------------------------
# The study's ladder (ladder.json)

# What a ladder keeps of each arm's verdict (the keys and values of comparison.json)
ROW_KEYS = ("settings_tried", "selected", "selected_by_budget", "final_val_loss", "multiplier", "saving_interpolated",
            "saving_wallclock", "eval_seeds", "within_fit_error", "verdict")


@dataclass(frozen=True)
class RungArm:
    """One study arm at one rung: its label in the verdict and the verdict's arm found for it (None: not
    in the verdict). `result` holds only what the ladder keeps of it (ROW_KEYS)."""

    arm: str
    label: Optional[str]
    result: Optional[Arm] = None

    @property
    def found(self) -> bool:
        return self.result is not None

    @classmethod
    def from_json(cls, row: dict) -> "RungArm":
        kept = {k: row[k] for k in ROW_KEYS if k in row}
        return cls(str(row.get("arm", "")), row.get("label"), Arm.from_json(kept) if row.get("found") else None)

    def to_json(self) -> dict:
        verdict = self.result.to_json() if self.result is not None else None
        return {"arm": self.arm, "label": self.label, "found": self.found,
                **({k: verdict.get(k) for k in ROW_KEYS} if verdict is not None else {})}


@dataclass(frozen=True)
class SettingLosses:
    """One setting an arm tried on the selection seeds: its final val loss per seed (by the seed's text) and
    their mean (None: no seed of the selection seeds)."""

    setting: dict[str, Any]
    losses: dict[str, float] = field(default_factory=dict)
    mean: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "SettingLosses":
        return cls(dict(e.get("setting") or {}), dict(e.get("losses") or {}), e.get("mean"))

    def to_json(self) -> dict:
        return {"setting": self.setting, "losses": self.losses, "mean": self.mean}


@dataclass(frozen=True)
class RunnerUp:
    """An arm's second best setting after a near tie, and its M against the same frontier (None: none had)."""

    setting: dict[str, Any]
    multiplier: Optional[Multiplier] = None

    @classmethod
    def from_json(cls, e: dict) -> "RunnerUp":
        return cls(dict(e.get("setting") or {}), _or_none(e.get("multiplier"), Multiplier))

    def to_json(self) -> dict:
        return {"setting": self.setting, "multiplier": _json(self.multiplier)}


@dataclass(frozen=True)
class ArmTuning:
    """What one study arm tried at a rung (the pilots that fixed its grid counted in), every setting's
    selection losses, and what it chose; the frontier's arm with a schedule control counts the control's
    settings in (`control_settings_run`, `control_selection_losses`). `setting`, `by_budget` and
    `control_by_budget` are None where the arm chose nothing."""

    pilots: int
    settings_run: int
    settings_tried: int
    selection_losses: tuple[SettingLosses, ...] = ()
    control_settings_run: Optional[int] = None
    control_selection_losses: Optional[tuple[SettingLosses, ...]] = None
    setting: Optional[dict[str, Any]] = None
    by_budget: Optional[dict[str, dict[str, Any]]] = None
    control_by_budget: Optional[dict[str, dict[str, Any]]] = None
    runner_up: Optional[RunnerUp] = None

    @classmethod
    def from_json(cls, e: dict) -> "ArmTuning":
        control = e.get("control_selection_losses")
        return cls(e.get("pilots") or 0, e.get("settings_run") or 0, e.get("settings_tried") or 0,
                   listed(e.get("selection_losses"), SettingLosses), e.get("control_settings_run"),
                   listed(control, SettingLosses) if control is not None else None, e.get("setting"),
                   e.get("by_budget"), e.get("control_by_budget"), _or_none(e.get("runner_up"), RunnerUp))

    def to_json(self) -> dict:
        out = {"pilots": self.pilots, "settings_run": self.settings_run, "settings_tried": self.settings_tried,
               "selection_losses": _json(self.selection_losses)}
        if self.control_selection_losses is not None:
            out.update(control_settings_run=self.control_settings_run,
                       control_selection_losses=_json(self.control_selection_losses))
        if self.setting is not None:
            out.update(setting=self.setting, by_budget=self.by_budget, control_by_budget=self.control_by_budget)
        if self.runner_up is not None:
            out["runner_up"] = self.runner_up.to_json()
        return out


@dataclass(frozen=True)
class RungTuning:
    """Stage 1 at one rung, as the study records it: the frontier's budgets, the selection seeds, and per
    study arm what it tried and chose."""

    frontier_budgets: tuple[str, ...] = ()
    selection_seeds: tuple = ()
    arms: dict[str, ArmTuning] = field(default_factory=dict)

    @classmethod
    def from_json(cls, e: dict) -> "RungTuning":
        return cls(tuple(e.get("frontier_budgets") or ()), tuple(e.get("selection_seeds") or ()),
                   {str(k): ArmTuning.from_json(v) for k, v in (e.get("arms") or {}).items()})

    def to_json(self) -> dict:
        return {"frontier_budgets": list(self.frontier_budgets), "selection_seeds": list(self.selection_seeds),
                "arms": {k: v.to_json() for k, v in self.arms.items()}}


@dataclass(frozen=True)
class Rung:
    """One scale of the ladder: its size, each study arm's verdict there, the verdict's warnings and fit error,
    the runs that did not end; `tuning` (what stage 1 tried and chose) when the study records it."""

    scale: str
    x: float
    n_params: int
    max_steps: int
    tokens_per_param: float
    arms: tuple[RungArm, ...] = ()
    has_verdict: bool = False
    why_no_verdict: Optional[str] = None
    warnings: tuple[str, ...] = ()
    fit_error: Optional[FitError] = None
    optimistic: Optional[bool] = None
    missing_runs: tuple[str, ...] = ()
    tuning: Optional[RungTuning] = None

    @classmethod
    def from_json(cls, s: dict) -> "Rung":
        return cls(str(s.get("scale", "")), s.get("x", s.get("n_params")), s.get("n_params"), s.get("max_steps"),
                   s.get("tokens_per_param"), tuple(RungArm.from_json(a) for a in s.get("arms") or ()),
                   s.get("verdict") is not None, s.get("why_no_verdict"), tuple(s.get("warnings") or ()),
                   _or_none(s.get("fit_error"), FitError), s.get("optimistic"), tuple(s.get("missing_runs") or ()),
                   _or_none(s.get("tuning"), RungTuning))

    def to_json(self, with_tuning: bool = False) -> dict:
        out = {"scale": self.scale, "x": self.x, "n_params": self.n_params, "max_steps": self.max_steps,
               "tokens_per_param": self.tokens_per_param, "arms": _json(self.arms),
               "verdict": "comparison.json" if self.has_verdict else None, "why_no_verdict": self.why_no_verdict,
               "warnings": list(self.warnings), "fit_error": _json(self.fit_error), "optimistic": self.optimistic,
               "missing_runs": list(self.missing_runs)}
        if with_tuning:
            out["tuning"] = _json(self.tuning)
        return out


@dataclass(frozen=True)
class Prediction:
    """M at a larger size on a trend's fitted line, with its interval: an extrapolation beyond the ladder."""

    n_params: float
    M: float
    M_lo: float
    M_hi: float
    beyond_largest: float  # n_params over the largest rung's

    @classmethod
    def from_json(cls, p: dict) -> "Prediction":
        return cls(p.get("n_params"), p.get("M"), p.get("M_lo"), p.get("M_hi"), p.get("beyond_largest"))

    def to_json(self) -> dict:
        return {"n_params": self.n_params, "M": self.M, "M_lo": self.M_lo, "M_hi": self.M_hi,
                "beyond_largest": self.beyond_largest}


@dataclass(frozen=True)
class ExcludedRung:
    """A rung left out of a trend's points (its M only a bound, its interval unbounded, too few seeds): its
    value on the ladder's axis and why."""

    x: float
    why: str

    @classmethod
    def from_json(cls, e: dict) -> "ExcludedRung":
        return cls(e.get("x"), e.get("why", ""))

    def to_json(self) -> dict:
        return {"x": self.x, "why": self.why}


@dataclass(frozen=True)
class Step:
    """Between two neighbouring rungs of a trend: the change in log M, its standard error, and the word:
    "up" or "down" where the change is at least twice its standard error, else "unresolved"."""

    x_from: float
    x_to: float
    diff: float
    se: float
    word: str

    @classmethod
    def from_json(cls, e: dict) -> "Step":
        return cls(e.get("x_from"), e.get("x_to"), e.get("diff"), e.get("se"), e.get("word", ""))

    def to_json(self) -> dict:
        return {"x_from": self.x_from, "x_to": self.x_to, "diff": self.diff, "se": self.se, "word": self.word}


# A trend's fitted line: its keys, in ladder.json's order (only a trend with a slope has them); `steps` after them
TREND_FIT_KEYS = ("slope", "slope_lo", "slope_hi", "intercept", "cov", "quantile", "method", "n_min", "n_max", "n_draws",
                  "monotone", "dof", "contrast", "contrast_lo", "contrast_hi")


@dataclass(frozen=True)
class Trend:
    """One arm's trend along the ladder's axis: the slope of log M against log x with its interval (none
    where too few rungs tell: `why` says so), the first-to-last contrast with its interval, each step
    between neighbouring rungs (`steps`), its word (`verdict`), its sentence and its predictions; the
    rungs left out as points (`excluded`: x and why)."""

    arm: str
    verdict: str
    sentence: str = ""
    n_scales: int = 0
    excluded: tuple[ExcludedRung, ...] = ()
    why: Optional[str] = None
    slope: Optional[float] = None
    slope_lo: Optional[float] = None
    slope_hi: Optional[float] = None
    intercept: Optional[float] = None
    cov: Optional[list] = None
    quantile: Optional[float] = None
    method: Optional[str] = None
    n_min: Optional[float] = None
    n_max: Optional[float] = None
    n_draws: Optional[int] = None
    monotone: Optional[str] = None
    dof: Optional[float] = None  # the t quantile's degrees of freedom (Satterthwaite; None: a normal)
    contrast: Optional[float] = None  # log M_last − log M_first, with its interval
    contrast_lo: Optional[float] = None
    contrast_hi: Optional[float] = None
    predictions: tuple[Prediction, ...] = ()
    steps: tuple[Step, ...] = ()

    @classmethod
    def from_json(cls, t: dict) -> "Trend":
        return cls(str(t.get("arm", "")), str(t.get("verdict", "")), t.get("sentence", ""), t.get("n_scales") or 0,
                   listed(t.get("excluded"), ExcludedRung), t.get("why"), *(t.get(k) for k in TREND_FIT_KEYS),
                   tuple(Prediction.from_json(p) for p in t.get("predictions") or ()), listed(t.get("steps"), Step))

    def to_json(self) -> dict:
        out = {"arm": self.arm, "n_scales": self.n_scales, "excluded": _json(self.excluded)}
        if self.slope is not None:
            out.update({k: getattr(self, k) for k in TREND_FIT_KEYS}, steps=_json(self.steps))
        out["verdict"] = self.verdict
        if self.slope is None:
            out["why"] = self.why
        return {**out, "sentence": self.sentence, "predictions": _json(self.predictions)}


@dataclass(frozen=True)
class Ladder:
    """The study's ladder report: per rung each arm's verdict, per arm its trend along the ladder's axis."""

    study: str
    axis: str
    axis_label: str
    frontier_arm: str
    flat_slope: float
    min_scales_for_trend: int
    min_seeds_for_trend: int
    rungs: tuple[Rung, ...] = ()
    trends: tuple[Trend, ...] = ()
    with_tuning: bool = False  # each rung's `tuning` is written (the study records it)

    @classmethod
    def from_json(cls, r: dict) -> "Ladder":
        scales = r.get("scales") or ()
        return cls(r.get("study", ""), r.get("axis", "params"), r.get("axis_label", ""), r.get("frontier_arm", ""),
                   r.get("flat_slope"), r.get("min_scales_for_trend"), r.get("min_seeds_for_trend"),
                   tuple(Rung.from_json(s) for s in scales), tuple(Trend.from_json(t) for t in r.get("trends") or ()),
                   any("tuning" in s for s in scales))

    def to_json(self) -> dict:
        return {"study": self.study, "axis": self.axis, "axis_label": self.axis_label, "frontier_arm": self.frontier_arm,
                "flat_slope": self.flat_slope, "min_scales_for_trend": self.min_scales_for_trend,
                "min_seeds_for_trend": self.min_seeds_for_trend,
                "scales": [r.to_json(self.with_tuning) for r in self.rungs], "trends": _json(self.trends)}
