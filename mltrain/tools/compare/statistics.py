"""The numbers behind a comparison, on plain arrays: curves, crossings, intervals, the frontier's envelope.

Nothing here knows about files or runs; `analysis` feeds it arrays and per-seed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np
from scipy import stats
from scipy.interpolate import PchipInterpolator

from mltrain.core.jsonable import Jsonable

CONFIDENCE = 0.95
MIN_SEEDS = 3
INTERVAL_METHOD = "Student t interval over seeds (scipy.stats.t, n-1 degrees of freedom, standard error from scipy.stats.sem)"


def moving_average(values: np.ndarray, n: int) -> np.ndarray:
    """Trailing moving average: out[i] = mean(values[max(0, i-n+1) : i+1])."""
    values = np.asarray(values, dtype=float)
    if n <= 1 or values.size == 0:
        return values.copy()
    c = np.concatenate([[0.0], np.cumsum(values)])
    i = np.arange(1, values.size + 1)
    lo = np.maximum(0, i - n)
    return (c[i] - c[lo]) / (i - lo)


def first_reach(flops: np.ndarray, loss: np.ndarray, target: float) -> float | None:
    """First FLOPs at which `loss` <= target (linear interpolation between logged rows), or None."""
    if target is None or flops.size == 0:
        return None
    tol = 1e-12 * max(1.0, abs(target))
    hit = np.nonzero(loss <= target + tol)[0]
    if hit.size == 0:
        return None
    i = int(hit[0])
    if i == 0:
        return float(flops[0])
    l0, l1, f0, f1 = loss[i - 1], loss[i], flops[i - 1], flops[i]
    frac = (l0 - target) / (l0 - l1) if l0 != l1 else 1.0
    return float(f0 + min(max(frac, 0.0), 1.0) * (f1 - f0))


def value_at(flops: np.ndarray, loss: np.ndarray, at: float) -> float | None:
    """The curve's value at `at` FLOPs (linear interpolation between logged rows); None outside the
    logged range: a run is never extrapolated past its end."""
    if flops.size == 0 or at < flops[0] or at > flops[-1] * (1 + 1e-12):
        return None
    return float(np.interp(at, flops, loss))


# ---------------------------------------------------------------------------------------------
# Intervals over seeds


@dataclass(frozen=True)
class SeedInterval(Jsonable):
    """Mean and the two-sided CONFIDENCE interval of per-seed values (paired differences or savings), with
    what it warns of: `interval`'s reading, as the report holds it."""

    n: int
    mean: Optional[float] = None
    std: Optional[float] = None  # sample std, ddof=1
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    confidence: float = CONFIDENCE
    warnings: tuple[str, ...] = ()

    def warned(self, warning: str) -> "SeedInterval":
        """The same interval with one more warning."""
        return replace(self, warnings=(*self.warnings, warning))


def interval(values: Sequence[Optional[float]], zero_means: str = "no difference") -> SeedInterval:
    """Mean and the two-sided 95% Student t interval of `values` (one per seed).

    None and non-finite values are left out. Warnings: fewer than MIN_SEEDS values (an interval from 2 seeds
    is nearly meaningless; from 1 there is none); the interval contains 0 (`zero_means` says what that would
    be, e.g. "no saving")."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        return SeedInterval(0, warnings=("no seeds",))
    mean = float(x.mean())
    warnings = [f"only {n} seed{'s' if n != 1 else ''}: fewer than {MIN_SEEDS}, no reliable interval"] if n < MIN_SEEDS else []
    if n == 1:
        return SeedInterval(1, mean, warnings=tuple(warnings))
    std = float(x.std(ddof=1))
    sem = float(stats.sem(x))
    if sem == 0.0:
        low = high = mean
    else:
        low, high = (float(v) for v in stats.t.interval(CONFIDENCE, n - 1, loc=mean, scale=sem))
    if low <= 0.0 <= high:
        warnings.append(f"the 95% interval contains 0 ({zero_means} is consistent with these seeds)")
    return SeedInterval(n, mean, std, low, high, CONFIDENCE, tuple(warnings))


def interval_word(n: Optional[int], low: Optional[float], high: Optional[float], zero: float = 0.0) -> str:
    """An interval's verdict on a saving (`zero`: no saving): above it, below it, or across it."""
    if low is None:
        return f"too few seeds (n={n})"
    return "saves FLOPs" if low > zero else ("costs FLOPs" if high is not None and high < zero else
                                            "no evidence either way")


# ---------------------------------------------------------------------------------------------
# The frontier: the lower envelope of (FLOPs, final loss) points, read by interpolation


@dataclass(frozen=True)
class FrontierPoint:
    flops: float
    loss: float
    budget: Optional[float] = None  # the run's train.budget, for the report
    source: Optional[str] = None  # the run it comes from (None: a mean over seeds)


def lower_envelope(points: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    """The points no cheaper point beats: sorted by FLOPs, each with a lower loss than every point
    before it. With F FLOPs one can run any of the schedules that end at or before F, so the best
    single-level loss at F is the running minimum; a dominated point (a longer budget that ended worse
    than a shorter one) is dropped."""
    out: list[FrontierPoint] = []
    for p in sorted(points, key=lambda p: (p.flops, p.loss)):
        if not (math.isfinite(p.flops) and math.isfinite(p.loss)) or p.flops <= 0:
            continue
        if not out or p.loss < out[-1].loss:  # (equal FLOPs: the lower loss comes first and wins)
            out.append(p)
    return out


@dataclass
class FrontierReading:
    """Where a loss falls on the frontier: `flops` is the single-level FLOPs needed to reach it
    (interpolated linearly in log FLOPs), or None when it lies outside; `side` then says which way."""

    flops: Optional[float]
    side: Optional[str] = None  # None inside; "below" (lower than the longest budget); "above" (higher than the shortest)
    bound_flops: Optional[float] = None  # outside: the frontier end it is beyond


def frontier_flops(envelope: Sequence[FrontierPoint], loss: float) -> FrontierReading:
    """Single-level FLOPs needed to reach `loss` on the envelope (see lower_envelope)."""
    if len(envelope) < 2:
        raise ValueError("a frontier needs at least two budgets")
    if loss > envelope[0].loss:
        return FrontierReading(None, "above", envelope[0].flops)
    if loss < envelope[-1].loss:
        return FrontierReading(None, "below", envelope[-1].flops)
    for a, b in zip(envelope, envelope[1:]):
        if b.loss <= loss <= a.loss:
            t = (a.loss - loss) / (a.loss - b.loss)
            return FrontierReading(math.exp(math.log(a.flops) + t * (math.log(b.flops) - math.log(a.flops))))
    raise AssertionError("unreachable: the envelope is strictly decreasing")  # pragma: no cover


def smooth_frontier_flops(envelope: Sequence[FrontierPoint], loss: float) -> FrontierReading:
    """As frontier_flops, with a shape-preserving monotone cubic (scipy's PchipInterpolator) of log FLOPs
    in loss through the envelope's points instead of straight lines: it keeps the frontier's curvature
    between its points, where a straight chord reads a convex frontier's F* too high (on L = 2 + C^−0.35,
    by up to 2.1% between budgets a factor 2 apart; the cubic within 0.25%), and passes through every
    point; outside the ends, as frontier_flops."""
    reading = frontier_flops(envelope, loss)
    if reading.flops is None or len(envelope) < 3:
        return reading
    losses = np.array([p.loss for p in reversed(envelope)])
    log_flops = np.log([p.flops for p in reversed(envelope)])
    return FrontierReading(float(np.exp(PchipInterpolator(losses, log_flops)(loss))))


def frontier_loss(envelope: Sequence[FrontierPoint], flops: float) -> Optional[float]:
    """The best single-level loss at `flops` FLOPs (linear in log FLOPs between budgets); None outside
    [cheapest, dearest] budget."""
    if len(envelope) < 2 or flops < envelope[0].flops or flops > envelope[-1].flops:
        return None
    for a, b in zip(envelope, envelope[1:]):
        if a.flops <= flops <= b.flops:
            t = (math.log(flops) - math.log(a.flops)) / (math.log(b.flops) - math.log(a.flops))
            return a.loss + t * (b.loss - a.loss)
    return None  # pragma: no cover
