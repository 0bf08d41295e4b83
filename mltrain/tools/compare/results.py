"""The verdict as typed results: what a consumer of mltrain-compare (the study's ladder, a script) reads.

    from mltrain.tools.compare import compare
    report = compare(["multirun/"], select_seeds=[0])         # a Report
    for arm in report.arms:
        print(arm.label, arm.multiplier.M, arm.multiplier.bound)

`Report` holds the arms (`Arm`: the setting kept, the evaluation seeds, the compute multiplier `Multiplier`
with its `Headline` and `Bound`) and the frontier (`Frontier`: its fit's own error, `FitError`). Each
result keeps the JSON object it was read from (`json`), exactly as comparison.json holds it, so a report
that passes an entry on (ladder.json) writes the same keys and values; the typed fields are the ones
read to decide something. `from_json` reads comparison.json's objects, also one written by an earlier
mltrain-compare (a key it lacks takes its neutral value: no bound, no headline, no draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional



@dataclass(frozen=True)
class Bound:
    """An arm whose equal-loss point lies beyond the frontier's data: only M > value is known."""

    kind: str  # "lower"
    value: Optional[float]

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> Optional["Bound"]:
        if not entry or not entry.get("kind"):
            return None
        return cls(str(entry["kind"]), entry.get("value"))


@dataclass(frozen=True)
class Headline:
    """The M a report leads with: `kind` bound, interpolated, joint or per_run, with its interval."""

    kind: str
    M: Optional[float]
    M_lo: Optional[float]
    M_hi: Optional[float]
    M_hi_unbounded: bool = False

    @classmethod
    def from_json(cls, entry: dict) -> "Headline":
        return cls(str(entry["kind"]), entry.get("M"), entry.get("M_lo"), entry.get("M_hi"),
                   bool(entry.get("M_hi_unbounded")))


@dataclass(frozen=True)
class Multiplier:
    """An arm's compute multiplier M (the frontier's FLOPs for the same held-out loss over the arm's)."""

    available: bool
    why: Optional[str] = None
    M: Optional[float] = None
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    M_hi_unbounded: bool = False
    bound: Optional[Bound] = None
    headline: Optional[Headline] = None
    extrapolated: bool = False
    beyond_data: Optional[float] = None  # how far past the frontier's FLOPs the fitted curve was read
    draws: tuple[float, ...] = ()  # the bootstrap's M per draw (bootstrap_M)
    json: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "Multiplier":
        entry = entry or {}
        head = entry.get("headline")
        return cls(bool(entry.get("available")), entry.get("why"), entry.get("M"), entry.get("M_lo"), entry.get("M_hi"),
                   bool(entry.get("M_hi_unbounded")), Bound.from_json(entry.get("bound")),
                   Headline.from_json(head) if head else None, bool(entry.get("extrapolated")),
                   entry.get("beyond_data"), tuple(entry.get("bootstrap_M") or ()), entry)

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
class FitError:
    """The fitted frontier read at its own points: M there, which a perfect fit puts at 1 everywhere."""

    available: bool
    M_lo: Optional[float] = None
    M_hi: Optional[float] = None
    json: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "FitError":
        entry = entry or {}
        return cls(bool(entry.get("available")), entry.get("M_lo"), entry.get("M_hi"), entry)

    @property
    def band(self) -> Optional[float]:
        """The error as a half-width in log M (the widest of its per-budget readings), or None."""
        if not self.available:
            return None
        return max(abs(math.log(self.M_lo)), abs(math.log(self.M_hi)))


@dataclass(frozen=True)
class Frontier:
    """The tuned single-level frontier, as far as its consumers read it."""

    fit_error: FitError
    json: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, entry: Optional[dict]) -> "Frontier":
        entry = entry or {}
        return cls(FitError.from_json(entry.get("fit_error")), entry)


@dataclass(frozen=True)
class Arm:
    """One arm of the verdict: a method with its tuned keys left free, at the setting kept for it."""

    label: str
    run_kind: str
    selected: dict[str, Any]
    selected_by_budget: dict[str, dict[str, Any]]  # the single-level arm's setting per budget
    eval_seeds: tuple
    multiplier: Multiplier
    is_frontier: bool = False  # the single-level arm: its settings are the frontier
    json: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, entry: dict) -> "Arm":
        return cls(str(entry.get("label", "")), str(entry.get("run_kind", "")), dict(entry.get("selected") or {}),
                   {str(b): dict(s) for b, s in (entry.get("selected_by_budget") or {}).items()},
                   tuple(entry.get("eval_seeds") or ()), Multiplier.from_json(entry.get("multiplier")),
                   bool(entry.get("is_frontier")), entry)


@dataclass(frozen=True)
class Report:
    """mltrain-compare's verdict: its arms, its frontier, what it warns of, and whether it is optimistic
    (a setting chosen on the seeds that measure it)."""

    arms: tuple[Arm, ...]
    frontier: Frontier
    warnings: tuple[str, ...] = ()
    optimistic: Optional[bool] = None
    json: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, report: dict) -> "Report":
        return cls(tuple(Arm.from_json(a) for a in report.get("arms") or ()), Frontier.from_json(report.get("frontier")),
                   tuple(report.get("warnings") or ()), report.get("optimistic"), report)
