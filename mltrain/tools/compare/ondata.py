"""An arm's compute multiplier read on the frontier's own points, no curve: each run on its seed's envelope
(the mean envelope, unpaired, for a seed without its own), M_run = F* / C_run with F* the single-level
FLOPs that reach the run's final loss (between the envelope's points a monotone cubic of log FLOPs in
loss, statistics.smooth_frontier_flops: a straight chord reads a convex frontier's F* too high, and
costs the interval its coverage where the seeds agree closely).

* **Inside the data** (every run between its envelope's ends): M is the geometric mean over the runs,
  with a Student t interval on log M (n − 1 degrees of freedom): kind "interpolated".
* **Beyond the data, decided on the data**: a run's gap is its final loss minus its envelope's lowest
  loss (the frontier's largest FLOPs C_max). The arm lies beyond the frontier's data only when the
  one-sided upper BEYOND_CONFIDENCE limit of the mean gap (Student t, n − 1 df) is below 0: then its
  reading is a bound, M > the lower BEYOND_CONFIDENCE confidence limit of M (`lower_limit`): the lesser of
  the t limit of the mean censored log M (a run beyond counted at C_max / C_run, the least it can be; a
  run inside at its own reading) and the FLOPs the frontier's mean envelope needs for its lowest loss
  plus the gap's upper limit, over C_run: kind "bound". A run inside always counts; one run never makes
  a bound.
* **Anything else** (some runs outside, not beyond with confidence): no reading (kind None), with the
  lower limit kept: the fitted frontier reads such an arm, and where no fit can be trusted that limit is
  the data-only bound the report prints.

Nothing here knows about files or fits: `verdict` hands it envelopes and runs; scripts/simulate_verdict.py draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, TypedDict

import numpy as np
from scipy import stats

from mltrain.tools.compare.results import DataReading
from mltrain.tools.compare.statistics import CONFIDENCE, FrontierPoint, frontier_flops, smooth_frontier_flops

BEYOND_CONFIDENCE = 0.975  # one-sided confidence that the arm lies beyond the data; and of its bound


@dataclass(frozen=True)
class RunOnData:
    """One run read on its envelope: inside, log M; outside, the frontier end it is beyond."""

    seed: Any
    flops: float
    loss: float
    paired: bool
    side: Optional[str]  # None inside; "below" (lower than the longest budget reaches); "above"
    log_m: Optional[float]  # inside: log F* / C_run
    log_m_censored: float  # below: log C_max / C_run (the least it can be); above: log C_min / C_run
    gap: float  # final loss − the envelope's lowest loss (< 0: lower than the frontier ever got)


def run_on_data(envelope: Sequence[FrontierPoint], paired: bool, seed: Any, flops: float, loss: float) -> RunOnData:
    reading = smooth_frontier_flops(envelope, loss)
    gap = loss - envelope[-1].loss
    if reading.flops is not None:
        log_m = math.log(reading.flops / flops)
        return RunOnData(seed, flops, loss, paired, None, log_m, log_m, gap)
    if reading.bound_flops is None:  # frontier_flops names the end a loss outside lies beyond
        raise ValueError(f"loss {loss} outside the frontier without the end it lies beyond")
    return RunOnData(seed, flops, loss, paired, reading.side, None, math.log(reading.bound_flops / flops), gap)


def t_mean(values: Sequence[float], confidence: float) -> tuple[float, Optional[float], Optional[float]]:
    """(mean, standard error, the t quantile at `confidence` with n − 1 df); no error with one value."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), None, None
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)), float(stats.t.ppf(confidence, x.size - 1))


def _censored_limit(runs: Sequence[RunOnData]) -> Optional[float]:
    """The lower BEYOND_CONFIDENCE t limit of the mean of the runs' censored log M (None with one run): a
    lower confidence limit for M when the runs lie beyond the data with confidence (M > C_max / C_run
    then, and this is no more than that)."""
    mean, se, q = t_mean([r.log_m_censored for r in runs], BEYOND_CONFIDENCE)
    return math.exp(mean - q * se) if se is not None and q is not None else None


def _gap_limit(runs: Sequence[RunOnData], gap_upper: Optional[float],
               envelope: Optional[Sequence[FrontierPoint]]) -> Optional[float]:
    """M's lower confidence limit from the loss gap: with BEYOND_CONFIDENCE the arm's mean loss is at most
    the frontier's lowest (the mean over the runs' envelopes) + `gap_upper`; the FLOPs the mean envelope
    needs for that loss over the runs' (geometric mean) FLOPs. The censored readings alone would be too
    tight when most runs are censored at one value (their spread is gone)."""
    if gap_upper is None or envelope is None or len(envelope) < 2:
        return None
    target = float(np.mean([r.loss - r.gap for r in runs])) + gap_upper
    reading = frontier_flops(envelope, target)
    flops = reading.flops if reading.flops is not None else (envelope[-1].flops if reading.side == "below" else None)
    return flops / math.exp(float(np.mean([math.log(r.flops) for r in runs]))) if flops else None


def _lower_limit(runs: Sequence[RunOnData], gap_upper: Optional[float],
                 envelope: Optional[Sequence[FrontierPoint]]) -> Optional[float]:
    """The lesser of the two lower limits that exist (None with one run)."""
    limits = [v for v in (_censored_limit(runs), _gap_limit(runs, gap_upper, envelope)) if v is not None]
    return min(limits) if limits else None


def beyond_with_confidence(runs: Sequence[RunOnData]) -> tuple[bool, Optional[float]]:
    """(whether the runs' loss lies below the frontier's lowest with confidence, the upper limit of the
    mean gap): the one-sided upper BEYOND_CONFIDENCE t limit of the mean gap below 0."""
    mean, se, q = t_mean([r.gap for r in runs], BEYOND_CONFIDENCE)
    if se is None or q is None:
        return False, None
    upper = mean + q * se
    return upper < 0, upper


class _Counts(TypedDict):
    """The fields every DataReading of an arm's runs has (results.py)."""

    n: int
    n_below: int
    n_above: int
    gap_upper: Optional[float]
    lower_limit: Optional[float]


def read_on_data(runs: Sequence[RunOnData], mean_envelope: Optional[Sequence[FrontierPoint]] = None) -> DataReading:
    """The arm's reading on the frontier's points (see the module docstring); `mean_envelope` (the
    envelope of the frontier's means over seeds) turns the loss gap's confidence limit into FLOPs."""
    if not runs:
        return DataReading(None, "no run read on a frontier envelope")
    below = sum(r.side == "below" for r in runs)
    above = sum(r.side == "above" for r in runs)
    beyond, gap_upper = beyond_with_confidence(runs)
    counts = _Counts(n=len(runs), n_below=below, n_above=above, gap_upper=gap_upper,
                  lower_limit=_lower_limit(runs, gap_upper, mean_envelope))
    if beyond:
        return DataReading("bound", None, M_lo=counts["lower_limit"], **counts)
    if below or above:
        return DataReading(None, f"{below + above} of {len(runs)} run(s) outside the frontier's points "
                                 f"({below} below its longest budget, {above} above its shortest), not beyond its "
                                 f"data with {BEYOND_CONFIDENCE:.1%} confidence", **counts)
    log_m = [r.log_m for r in runs if r.log_m is not None]  # every run inside: each has its log M
    if len(log_m) < len(runs):
        raise ValueError("a run inside the frontier's points without its log M")
    mean, se, q = t_mean(log_m, 1 - (1 - CONFIDENCE) / 2)
    if se is None or q is None:
        return DataReading("interpolated", None, math.exp(mean), **counts)
    return DataReading("interpolated", None, math.exp(mean), math.exp(mean - q * se), math.exp(mean + q * se),
                       se, len(runs) - 1, **counts)
