"""The per-configuration tables of a comparison as typed results (what `analysis` computes and
comparison.json holds beside the arms' verdict): every configuration with its runs, each against the
one baseline and the schedule control (`VsReference`), against the tuned frontier's points
(`VsFrontier`), the held-out loss at fixed FLOPs (`FixedFlops`), the held-out set (`HeldOut`), the
uncounted costs (`UncountedCost`) and one line per configuration (`ConfigVerdict`); beside them what
`Report` records of how it was made (`LeftOut`, `Baseline`, `BootstrapRecord`, `Outputs`).

Each class writes its object with `to_json`, in comparison.json's keys and key order, and reads one back
with `from_json` (a key it lacks takes its neutral value); `json_value` and `optional` are the helpers
every typed result (results.py too) writes and reads with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from mltrain.tools.compare.statistics import CONFIDENCE, Interval


def json_value(value: Any) -> Any:
    """A result (or a list of them) as its JSON."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def optional(entry: Optional[dict], cls) -> Any:
    """`cls` read from `entry`, or None where there is none."""
    return cls.from_json(entry) if entry else None


def listed(entries: Any, cls) -> tuple:
    """`cls` read from each of `entries` (none: empty)."""
    return tuple(cls.from_json(e) for e in entries or ())


@dataclass(frozen=True)
class SeedInterval:
    """Mean and 95% interval of per-seed values (statistics.interval), with what it warns of."""

    n: int
    mean: Optional[float] = None
    std: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    confidence: float = CONFIDENCE
    warnings: tuple[str, ...] = ()

    @classmethod
    def of(cls, iv: Interval) -> "SeedInterval":
        return cls(iv.n, iv.mean, iv.std, iv.low, iv.high, CONFIDENCE, tuple(iv.warnings))

    def warned(self, warning: str) -> "SeedInterval":
        """The same interval with one more warning."""
        return replace(self, warnings=(*self.warnings, warning))

    @classmethod
    def from_json(cls, e: dict) -> "SeedInterval":
        return cls(e.get("n") or 0, e.get("mean"), e.get("std"), e.get("ci_low"), e.get("ci_high"),
                   e.get("confidence", CONFIDENCE), tuple(e.get("warnings") or ()))

    def to_json(self) -> dict:
        return {"n": self.n, "mean": self.mean, "std": self.std, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "confidence": self.confidence, "warnings": list(self.warnings)}


@dataclass(frozen=True)
class Outside:
    """How many runs lay outside the frontier's ends: below its longest budget, above its shortest."""

    below: int = 0
    above: int = 0

    @classmethod
    def from_json(cls, e: dict) -> "Outside":
        return cls(e.get("below") or 0, e.get("above") or 0)

    def to_json(self) -> dict:
        return {"below": self.below, "above": self.above}

    @property
    def total(self) -> int:
        return self.below + self.above


@dataclass(frozen=True)
class Reference:
    """The configuration a table row is measured against (the one baseline, a schedule control), and for
    a control how it was matched (`matched_by`)."""

    label: str
    run_kind: str
    matched_by: Optional[str] = None

    @classmethod
    def from_json(cls, e: dict) -> "Reference":
        return cls(e.get("label", ""), e.get("run_kind", ""), e.get("matched_by"))

    def to_json(self) -> dict:
        out = {"label": self.label, "run_kind": self.run_kind}
        if self.matched_by is not None:
            out["matched_by"] = self.matched_by
        return out


@dataclass(frozen=True)
class Baseline:
    """The one full-length single-level baseline: its configuration and seeds."""

    label: str
    run_kind: str
    seeds: tuple = ()

    @classmethod
    def from_json(cls, e: dict) -> "Baseline":
        return cls(e.get("label", ""), e.get("run_kind", ""), tuple(e.get("seeds") or ()))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "seeds": list(self.seeds)}


@dataclass(frozen=True)
class TargetReading:
    """One run against a reference's final loss on one metric (train or val): the FLOPs it needed to reach
    it, its saving against the reference's FLOPs (also blocks-only), its own final loss and the difference."""

    target: Optional[float]
    reference_flops: Optional[float] = None
    flops: Optional[float] = None
    reached: bool = False
    saving: Optional[float] = None
    saving_blocks: Optional[float] = None
    final_loss: Optional[float] = None
    loss_diff: Optional[float] = None
    note: Optional[str] = None  # why there is no reading (no target, no loss rows)

    @classmethod
    def from_json(cls, e: dict) -> "TargetReading":
        return cls(e.get("target"), e.get("reference_flops"), e.get("flops"), bool(e.get("reached")), e.get("saving"),
                   e.get("saving_blocks"), e.get("final_loss"), e.get("loss_diff"), e.get("note"))

    def to_json(self) -> dict:
        out = {"target": self.target, "reference_flops": self.reference_flops, "flops": self.flops,
               "reached": self.reached, "saving": self.saving, "saving_blocks": self.saving_blocks,
               "final_loss": self.final_loss, "loss_diff": self.loss_diff}
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class SeedVsReference:
    """One run (seed) against the reference's run of the same seed (`paired`; else the reference's mean),
    on train and on val loss."""

    seed: Any
    run: str
    paired: bool
    train: TargetReading
    val: TargetReading

    @classmethod
    def from_json(cls, e: dict) -> "SeedVsReference":
        return cls(e.get("seed"), e.get("run", ""), bool(e.get("paired")), TargetReading.from_json(e.get("train") or {}),
                   TargetReading.from_json(e.get("val") or {}))

    def to_json(self) -> dict:
        return {"seed": self.seed, "run": self.run, "paired": self.paired, "train": self.train.to_json(),
                "val": self.val.to_json()}


@dataclass(frozen=True)
class TargetSummary:
    """One metric over a configuration's seeds against a reference: how many reached its final loss, the
    FLOPs and savings' means and spreads, and the paired intervals of the saving, the blocks-only saving
    and the final loss difference."""

    n_runs: int
    n_reached: int
    mean_flops: Optional[float]
    std_flops: Optional[float]
    mean_saving: Optional[float]
    std_saving: Optional[float]
    saving_interval: SeedInterval
    saving_blocks_interval: SeedInterval
    loss_diff_interval: SeedInterval

    @classmethod
    def from_json(cls, e: dict) -> "TargetSummary":
        iv = [SeedInterval.from_json(e.get(k) or {}) for k in ("saving_interval", "saving_blocks_interval",
                                                                "loss_diff_interval")]
        return cls(e.get("n_runs") or 0, e.get("n_reached") or 0, e.get("mean_flops"), e.get("std_flops"),
                   e.get("mean_saving"), e.get("std_saving"), *iv)

    def to_json(self) -> dict:
        return {"n_runs": self.n_runs, "n_reached": self.n_reached, "mean_flops": self.mean_flops,
                "std_flops": self.std_flops, "mean_saving": self.mean_saving, "std_saving": self.std_saving,
                "saving_interval": self.saving_interval.to_json(),
                "saving_blocks_interval": self.saving_blocks_interval.to_json(),
                "loss_diff_interval": self.loss_diff_interval.to_json()}


@dataclass(frozen=True)
class VsReference:
    """A configuration against a reference's final losses (the one baseline's, a schedule control's): per
    seed and summed up per metric."""

    label: str
    run_kind: str
    reference: Reference
    per_seed: tuple[SeedVsReference, ...]
    train: TargetSummary
    val: TargetSummary
    name: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "VsReference":
        return cls(e.get("label", ""), e.get("run_kind", ""), Reference.from_json(e.get("reference") or {}),
                   listed(e.get("per_seed"), SeedVsReference), TargetSummary.from_json(e.get("train") or {}),
                   TargetSummary.from_json(e.get("val") or {}), e.get("name", ""))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "reference": self.reference.to_json(),
                "per_seed": json_value(self.per_seed), "train": self.train.to_json(), "val": self.val.to_json(),
                "name": self.name}


@dataclass(frozen=True)
class SeedVsFrontier:
    """One run read on its seed's frontier (the mean's where the seed has none: not `paired`): the
    single-level FLOPs reaching its final loss and its saving (blocks-only too), or outside the frontier's
    ends only a bound (`saving_bound`: the operator and the value); its loss gap at equal FLOPs."""

    seed: Any
    run: str
    paired: bool
    final_val_loss: Optional[float] = None
    flops: Optional[float] = None
    flops_blocks: Optional[float] = None
    frontier_flops: Optional[float] = None
    outside: Optional[str] = None  # "below" the longest budget, "above" the shortest
    saving: Optional[float] = None
    saving_blocks: Optional[float] = None
    saving_bound: Optional[tuple[str, float]] = None
    loss_gap: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "SeedVsFrontier":
        bound = e.get("saving_bound")
        return cls(e.get("seed"), e.get("run", ""), bool(e.get("paired")), e.get("final_val_loss"), e.get("flops"),
                   e.get("flops_blocks"), e.get("frontier_flops"), e.get("outside"), e.get("saving"),
                   e.get("saving_blocks"), tuple(bound) if bound is not None else None, e.get("loss_gap"))

    def to_json(self) -> dict:
        return {"seed": self.seed, "run": self.run, "paired": self.paired, "final_val_loss": self.final_val_loss,
                "flops": self.flops, "flops_blocks": self.flops_blocks, "frontier_flops": self.frontier_flops,
                "outside": self.outside, "saving": self.saving, "saving_blocks": self.saving_blocks,
                "saving_bound": list(self.saving_bound) if self.saving_bound is not None else None,
                "loss_gap": self.loss_gap}


@dataclass(frozen=True)
class VsFrontier:
    """A configuration against the tuned frontier's points: per seed, and the intervals of its saving
    (blocks-only too) and loss gap, with how many runs lay outside the frontier; over all its runs, as the
    arms' verdict decides it: `bound` (M > bound, a lower confidence limit) where they lie beyond the
    frontier's data with confidence, else None, and `gap_upper`, the upper confidence limit of their mean
    loss gap to the frontier's lowest point."""

    label: str
    run_kind: str
    per_seed: tuple[SeedVsFrontier, ...]
    saving: SeedInterval
    saving_blocks: SeedInterval
    loss_gap: SeedInterval
    n_outside: Outside
    name: str = ""
    bound: Optional[float] = None
    gap_upper: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "VsFrontier":
        return cls(e.get("label", ""), e.get("run_kind", ""), listed(e.get("per_seed"), SeedVsFrontier),
                   *(SeedInterval.from_json(e.get(k) or {}) for k in ("saving", "saving_blocks", "loss_gap")),
                   Outside.from_json(e.get("n_outside") or {}), e.get("name", ""), e.get("bound"), e.get("gap_upper"))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "per_seed": json_value(self.per_seed),
                "saving": self.saving.to_json(), "saving_blocks": self.saving_blocks.to_json(),
                "loss_gap": self.loss_gap.to_json(), "n_outside": self.n_outside.to_json(), "name": self.name,
                "bound": self.bound, "gap_upper": self.gap_upper}


@dataclass(frozen=True)
class FixedFlopsCell:
    """A configuration's mean val loss at one fixed FLOPs (over `n` runs), and its paired difference from
    the baseline's there (`diff`; None for the baseline itself)."""

    mean_loss: Optional[float]
    n: int
    diff: Optional[SeedInterval] = None

    @classmethod
    def from_json(cls, e: dict) -> "FixedFlopsCell":
        return cls(e.get("mean_loss"), e.get("n") or 0, optional(e.get("diff"), SeedInterval))

    def to_json(self) -> dict:
        out = {"mean_loss": self.mean_loss, "n": self.n}
        if self.diff is not None:
            out["diff"] = self.diff.to_json()
        return out


@dataclass(frozen=True)
class FixedFlopsRow:
    """One configuration at every fixed FLOPs."""

    label: str
    run_kind: str
    is_baseline: bool
    cells: tuple[FixedFlopsCell, ...]
    name: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "FixedFlopsRow":
        return cls(e.get("label", ""), e.get("run_kind", ""), bool(e.get("is_baseline")),
                   listed(e.get("cells"), FixedFlopsCell), e.get("name", ""))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "is_baseline": self.is_baseline,
                "cells": json_value(self.cells), "name": self.name}


@dataclass(frozen=True)
class FixedFlops:
    """Held-out loss at fractions of the baseline's total FLOPs, one row per configuration."""

    flop_fractions: tuple[float, ...] = ()
    flops: tuple[float, ...] = ()
    rows: tuple[FixedFlopsRow, ...] = ()

    @classmethod
    def from_json(cls, e: dict) -> "FixedFlops":
        return cls(tuple(e.get("flop_fractions") or ()), tuple(e.get("flops") or ()), listed(e.get("rows"), FixedFlopsRow))

    def to_json(self) -> dict:
        return {"flop_fractions": list(self.flop_fractions), "flops": list(self.flops), "rows": json_value(self.rows)}


@dataclass(frozen=True)
class HeldOut:
    """The held-out set the runs were measured on: its size, and the standard error of a final val loss."""

    tokens: Optional[int] = None
    sequences: Optional[int] = None
    se_median: Optional[float] = None
    se_max: Optional[float] = None
    n_runs_with_se: int = 0

    @classmethod
    def from_json(cls, e: dict) -> "HeldOut":
        return cls(e.get("tokens"), e.get("sequences"), e.get("se_median"), e.get("se_max"), e.get("n_runs_with_se") or 0)

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "sequences": self.sequences, "se_median": self.se_median,
                "se_max": self.se_max, "n_runs_with_se": self.n_runs_with_se}


@dataclass(frozen=True)
class UncountedCost:
    """A configuration's diagnostics and evaluation FLOPs, as shares of its training FLOPs."""

    label: str
    run_kind: str
    diag_share: Optional[float]
    eval_share: Optional[float]
    name: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "UncountedCost":
        return cls(e.get("label", ""), e.get("run_kind", ""), e.get("diag_share"), e.get("eval_share"), e.get("name", ""))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "diag_share": self.diag_share,
                "eval_share": self.eval_share, "name": self.name}


@dataclass(frozen=True)
class ConfigVerdict:
    """One line per compared configuration: its saving against the frontier's points (`basis` "frontier"),
    else against the one baseline, in a word, with the other figures beside it."""

    label: str
    run_kind: str
    basis: str
    verdict: str
    n_seeds: int
    saving: SeedInterval
    saving_blocks: SeedInterval
    saving_vs_one_baseline: Optional[SeedInterval] = None
    loss_gap_vs_frontier: Optional[SeedInterval] = None
    n_outside: Optional[Outside] = None
    val_loss_diff_vs_control: Optional[SeedInterval] = None
    control: Optional[str] = None  # the schedule control's label
    name: str = ""
    saving_lower_limit: Optional[float] = None  # saving > this (1 − 1/VsFrontier.bound): beyond with confidence

    @classmethod
    def from_json(cls, e: dict) -> "ConfigVerdict":
        return cls(e.get("label", ""), e.get("run_kind", ""), e.get("basis", ""), e.get("verdict", ""),
                   e.get("n_seeds") or 0, SeedInterval.from_json(e.get("saving") or {}),
                   SeedInterval.from_json(e.get("saving_blocks") or {}),
                   optional(e.get("saving_vs_one_baseline"), SeedInterval),
                   optional(e.get("loss_gap_vs_frontier"), SeedInterval), optional(e.get("n_outside"), Outside),
                   optional(e.get("val_loss_diff_vs_control"), SeedInterval), e.get("control"), e.get("name", ""),
                   e.get("saving_lower_limit"))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "basis": self.basis, "verdict": self.verdict,
                "n_seeds": self.n_seeds, "saving": self.saving.to_json(), "saving_blocks": self.saving_blocks.to_json(),
                "saving_vs_one_baseline": json_value(self.saving_vs_one_baseline),
                "loss_gap_vs_frontier": json_value(self.loss_gap_vs_frontier), "n_outside": json_value(self.n_outside),
                "val_loss_diff_vs_control": json_value(self.val_loss_diff_vs_control), "control": self.control,
                "name": self.name, "saving_lower_limit": self.saving_lower_limit}


@dataclass(frozen=True)
class ConfigurationRun:
    """One run of a configuration: its final losses (train smoothed), the val loss's standard error, its
    total FLOPs (blocks-only too)."""

    seed: Any
    run: str
    final_train_loss_smoothed: Optional[float] = None
    final_val_loss: Optional[float] = None
    final_val_loss_se: Optional[float] = None
    total_flops: Optional[float] = None
    total_flops_blocks: Optional[float] = None

    @classmethod
    def from_json(cls, e: dict) -> "ConfigurationRun":
        return cls(e.get("seed"), e.get("run", ""), e.get("final_train_loss_smoothed"), e.get("final_val_loss"),
                   e.get("final_val_loss_se"), e.get("total_flops"), e.get("total_flops_blocks"))

    def to_json(self) -> dict:
        return {"seed": self.seed, "run": self.run, "final_train_loss_smoothed": self.final_train_loss_smoothed,
                "final_val_loss": self.final_val_loss, "final_val_loss_se": self.final_val_loss_se,
                "total_flops": self.total_flops, "total_flops_blocks": self.total_flops_blocks}


@dataclass(frozen=True)
class ConfigurationRow:
    """One configuration (a label and run kind) with its runs: whether it is the baseline, in the frontier."""

    label: str
    run_kind: str
    budget: Any
    seeds: tuple = ()
    n_seeds: int = 0
    is_baseline: bool = False
    in_frontier: bool = False
    runs: tuple[ConfigurationRun, ...] = ()
    name: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "ConfigurationRow":
        return cls(e.get("label", ""), e.get("run_kind", ""), e.get("budget"), tuple(e.get("seeds") or ()),
                   e.get("n_seeds") or 0, bool(e.get("is_baseline")), bool(e.get("in_frontier")),
                   listed(e.get("runs"), ConfigurationRun), e.get("name", ""))

    def to_json(self) -> dict:
        return {"label": self.label, "run_kind": self.run_kind, "budget": self.budget, "seeds": list(self.seeds),
                "n_seeds": self.n_seeds, "is_baseline": self.is_baseline, "in_frontier": self.in_frontier,
                "runs": json_value(self.runs), "name": self.name}


@dataclass(frozen=True)
class LeftOut:
    """A run left out of every statistic, with its status and why."""

    run: str
    label: str
    run_kind: str
    seed: Any
    status: str
    reason: Optional[str] = None

    @classmethod
    def from_json(cls, e: dict) -> "LeftOut":
        return cls(e.get("run", ""), e.get("label", ""), e.get("run_kind", ""), e.get("seed"), e.get("status", ""),
                   e.get("reason"))

    def to_json(self) -> dict:
        return {"run": self.run, "label": self.label, "run_kind": self.run_kind, "seed": self.seed,
                "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class BootstrapRecord:
    """How the multiplier's bootstrap was drawn: resamples, numpy seed, how many gave a fit, what it drew."""

    resamples: int
    seed: int
    refits: int
    what: str = ""

    @classmethod
    def from_json(cls, e: dict) -> "BootstrapRecord":
        return cls(e.get("resamples") or 0, e.get("seed") or 0, e.get("refits") or 0, e.get("what", ""))

    def to_json(self) -> dict:
        return {"resamples": self.resamples, "seed": self.seed, "refits": self.refits, "what": self.what}


@dataclass(frozen=True)
class Outputs:
    """The files the report was written to (None: not written)."""

    png: Optional[str] = None
    md: Optional[str] = None
    json: Optional[str] = None

    @classmethod
    def from_json(cls, e: dict) -> "Outputs":
        return cls(e.get("png"), e.get("md"), e.get("json"))

    def to_json(self) -> dict:
        return {"png": self.png, "md": self.md, "json": self.json}
