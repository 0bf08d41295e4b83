"""The per-configuration tables of a comparison as typed results (what `analysis` computes and
comparison.json holds beside the arms' verdict): every configuration with its runs, each against the
one baseline and the schedule control (`VsReference`), against the tuned frontier's points
(`VsFrontier`), the held-out loss at fixed FLOPs (`FixedFlops`), the held-out set (`HeldOut`), the
uncounted costs (`UncountedCost`) and one line per configuration (`ConfigVerdict`); beside them what
`Report` records of how it was made (`LeftOut`, `Baseline`, `BootstrapRecord`, `Outputs`).

Each is a `Jsonable` dataclass: its fields are comparison.json's keys in their order (mltrain/core/jsonable.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mltrain.core.jsonable import Jsonable, key
from mltrain.tools.compare.statistics import SeedInterval


@dataclass(frozen=True)
class Outside(Jsonable):
    """Runs outside the frontier's ends: below its longest budget, above its shortest."""

    below: int = 0
    above: int = 0

    @property
    def total(self) -> int:
        return self.below + self.above


@dataclass(frozen=True)
class Reference(Jsonable):
    """What a table row is measured against: the one baseline, or a schedule control (`matched_by`)."""

    label: str
    run_kind: str
    matched_by: Optional[str] = key(default=None, omit_none=True)


@dataclass(frozen=True)
class Baseline(Jsonable):
    """The one full-length single-level baseline."""

    label: str
    run_kind: str
    seeds: tuple = ()


@dataclass(frozen=True)
class TargetReading(Jsonable):
    """One run against a reference's final loss (`target`) on one metric (train or val)."""

    target: Optional[float]
    reference_flops: Optional[float] = None
    flops: Optional[float] = None
    reached: bool = False
    saving: Optional[float] = None
    saving_blocks: Optional[float] = None
    final_loss: Optional[float] = None
    loss_diff: Optional[float] = None
    note: Optional[str] = key(default=None, omit_none=True)  # why there is no reading (no target, no loss rows)


@dataclass(frozen=True)
class SeedVsReference(Jsonable):
    """One run against the reference's run of its seed (`paired`; else the reference's mean)."""

    seed: Any
    run: str
    paired: bool
    train: TargetReading
    val: TargetReading


@dataclass(frozen=True)
class TargetSummary(Jsonable):
    """One metric over a configuration's seeds against a reference."""

    n_runs: int
    n_reached: int
    mean_flops: Optional[float]
    std_flops: Optional[float]
    mean_saving: Optional[float]
    std_saving: Optional[float]
    saving_interval: SeedInterval
    saving_blocks_interval: SeedInterval
    loss_diff_interval: SeedInterval


@dataclass(frozen=True)
class VsReference(Jsonable):
    """A configuration against a reference's final losses, per seed and per metric."""

    label: str
    run_kind: str
    reference: Reference
    per_seed: tuple[SeedVsReference, ...]
    train: TargetSummary
    val: TargetSummary
    name: str = ""


@dataclass(frozen=True)
class SeedVsFrontier(Jsonable):
    """One run read on its seed's frontier (the mean's where the seed has none: not `paired`); outside the
    frontier's ends only a bound (`saving_bound`: the operator and the value)."""

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


@dataclass(frozen=True)
class VsFrontier(Jsonable):
    """A configuration against the tuned frontier's points; over all its runs, as the arms' verdict decides
    it: `bound` (M > bound) only where they lie beyond the frontier's data with confidence, and `gap_upper`,
    the upper confidence limit of their mean loss gap to the frontier's lowest point."""

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


@dataclass(frozen=True)
class FixedFlopsCell(Jsonable):
    """A configuration's mean val loss at one fixed FLOPs; `diff` from the baseline's (None: the baseline)."""

    mean_loss: Optional[float]
    n: int
    diff: Optional[SeedInterval] = key(default=None, omit_none=True)


@dataclass(frozen=True)
class FixedFlopsRow(Jsonable):
    """One configuration at every fixed FLOPs."""

    label: str
    run_kind: str
    is_baseline: bool
    cells: tuple[FixedFlopsCell, ...]
    name: str = ""


@dataclass(frozen=True)
class FixedFlops(Jsonable):
    """Held-out loss at fractions of the baseline's total FLOPs, one row per configuration."""

    flop_fractions: tuple[float, ...] = ()
    flops: tuple[float, ...] = ()
    rows: tuple[FixedFlopsRow, ...] = ()


@dataclass(frozen=True)
class HeldOut(Jsonable):
    """The held-out set: its size, and the standard error of a final val loss."""

    tokens: Optional[int] = None
    sequences: Optional[int] = None
    se_median: Optional[float] = None
    se_max: Optional[float] = None
    n_runs_with_se: int = 0


@dataclass(frozen=True)
class UncountedCost(Jsonable):
    """A configuration's diagnostics and evaluation FLOPs, as shares of its training FLOPs."""

    label: str
    run_kind: str
    diag_share: Optional[float]
    eval_share: Optional[float]
    name: str = ""


@dataclass(frozen=True)
class ConfigVerdict(Jsonable):
    """One line per configuration: its saving against the frontier's points, else the one baseline (`basis`)."""

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
    control: Optional[str] = None  # its label
    name: str = ""
    saving_lower_limit: Optional[float] = None  # saving > this (1 − 1/VsFrontier.bound): beyond with confidence


@dataclass(frozen=True)
class ConfigurationRun(Jsonable):
    """One run of a configuration."""

    seed: Any
    run: str
    final_train_loss_smoothed: Optional[float] = None
    final_val_loss: Optional[float] = None
    final_val_loss_se: Optional[float] = None
    total_flops: Optional[float] = None
    total_flops_blocks: Optional[float] = None


@dataclass(frozen=True)
class ConfigurationRow(Jsonable):
    """One configuration (a label and run kind) with its runs."""

    label: str
    run_kind: str
    budget: Any
    seeds: tuple = ()
    n_seeds: int = 0
    is_baseline: bool = False
    in_frontier: bool = False
    runs: tuple[ConfigurationRun, ...] = ()
    name: str = ""


@dataclass(frozen=True)
class LeftOut(Jsonable):
    """A run left out of every statistic, with its status and why."""

    run: str
    label: str
    run_kind: str
    seed: Any
    status: str
    reason: Optional[str] = None


@dataclass(frozen=True)
class BootstrapRecord(Jsonable):
    """How the multiplier's bootstrap was drawn (`refits`: how many draws gave a fit)."""

    resamples: int
    seed: int
    refits: int
    what: str = ""


@dataclass(frozen=True)
class Outputs(Jsonable):
    """The files the report was written to (None: not written)."""

    png: Optional[str] = None
    md: Optional[str] = None
    json: Optional[str] = None
