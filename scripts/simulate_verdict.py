"""How often the verdict's headline is right, on synthetic data sets whose true multiplier is known: the
coverage of its interval inside the frontier's data, and how often it prints a false bound.

A data set (`draw_data_set`): a well-specified frontier, per seed the loss L(C) = E + A·C^−α at each of
BUDGETS (× C_1) plus independent normal noise of sd NOISE, and an arm's runs, one per seed, at C_1
whose true loss is L(M·C_1) plus the same noise: M is the true multiplier. Each is read as
mltrain-compare reads it with no fit to lean on (`headline`): the runs on their seeds' envelopes
(ondata.py), then the headline rules of verdict.py.

    python scripts/simulate_verdict.py          # the figures, at 4 and 6 seeds

A measurement of mltrain-compare's rules (tests/tools/test_verdict_ondata.py runs it seeded), not a part
of the tool: it lives beside the project's other measurements in scripts/.

`coverage` counts the data sets whose headline is an interval holding the true M (any other headline
counts as a miss); `false_bounds` puts the true equal-loss point a factor `inside` below the frontier's
largest FLOPs and counts the data sets whose headline is a bound M > x with x above the true M, and,
stricter, those that say the arm lies beyond the data with confidence at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mltrain.tools.compare.ondata import read_on_data, run_on_data
from mltrain.tools.compare.results import FitError, Headline, Multiplier
from mltrain.tools.compare.statistics import FrontierPoint, lower_envelope
from mltrain.tools.compare.verdict import headline

E, ALPHA = 2.0, 0.35
A = 1.0  # with C in units of C_1: L(C_1) = E + A = 3.0
BUDGETS = (0.5, 1.0, 1.5, 2.0, 3.0)  # the study's frontier budgets (and its bracketing round), × C_1
NOISE = 0.01  # sd of a final val loss over seeds (about 0.3% at L = 3)


def law(c: np.ndarray | float) -> np.ndarray | float:
    return E + A * np.asarray(c, dtype=float) ** -ALPHA


@dataclass(frozen=True)
class Rates:
    """Of `n` data sets: how many hit (coverage: the interval held the true M; false bounds: a bound above
    the true M) and, for false bounds, how many said "beyond the data with confidence" at all."""

    n: int
    hits: int
    confident: int = 0

    @property
    def rate(self) -> float:
        return self.hits / self.n


def draw_data_set(rng: np.random.Generator, seeds: int, m_true: float, noise: float = NOISE,
                  budgets: Sequence[float] = BUDGETS) -> Multiplier:
    """One synthetic data set, read: the multiplier mltrain-compare gives it without a fit (its headline,
    and the reading on the frontier's points it came from, `on_data`)."""
    losses = law(np.asarray(budgets)) + rng.normal(0, noise, (seeds, len(budgets)))
    runs = []
    for s in range(seeds):
        env = lower_envelope([FrontierPoint(b, float(v)) for b, v in zip(budgets, losses[s])])
        runs.append(run_on_data(env, True, s, 1.0, float(law(m_true) + rng.normal(0, noise))))
    mean = lower_envelope([FrontierPoint(b, float(v)) for b, v in zip(budgets, losses.mean(axis=0))])
    return headline(Multiplier.unavailable("no fit: the simulation reads the frontier's points"),
                    read_on_data(runs, mean), None, FitError(False, "no fit"))


def _holds(head: Headline, m_true: float) -> bool:
    return (head.kind != "bound" and head.M_lo is not None and head.M_hi is not None
            and head.M_lo <= m_true <= head.M_hi)


def coverage(seeds: int, data_sets: int = 1000, seed: int = 0, m_range: tuple[float, float] = (1.15, 1.9),
             noise: float = NOISE) -> Rates:
    """How many data sets' headline interval holds the true M, drawn log-uniform in `m_range` (inside the
    frontier's data: its equal-loss point between budgets 1.15 and 1.9)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(data_sets):
        m_true = math.exp(rng.uniform(*np.log(m_range)))
        hits += _holds(draw_data_set(rng, seeds, m_true, noise).led_by(), m_true)
    return Rates(data_sets, hits)


def false_bounds(seeds: int, data_sets: int = 1000, seed: int = 0, inside: float = 0.02,
                 noise: float = NOISE) -> Rates:
    """How many data sets print a bound above the true M, the true equal-loss point `inside` (2%) below the
    frontier's largest FLOPs; `confident`: how many said the arm lies beyond the data with confidence (a
    false statement here, whatever the bound's value)."""
    rng = np.random.default_rng(seed)
    m_true = max(BUDGETS) / (1 + inside)
    hits = confident = 0
    for _ in range(data_sets):
        m = draw_data_set(rng, seeds, m_true, noise)
        head = m.led_by()
        hits += head.kind == "bound" and head.M_lo is not None and head.M_lo > m_true
        confident += m.on_data is not None and m.on_data.kind == "bound"
    return Rates(data_sets, hits, confident)


def main() -> None:
    for seeds in (4, 6):
        c = coverage(seeds)
        f = false_bounds(seeds)
        print(f"{seeds} seeds: coverage {c.hits}/{c.n} = {c.rate:.1%}; bounds above the true M (2% inside the data) "
              f"{f.hits}/{f.n} = {f.rate:.1%}; 'beyond with confidence' {f.confident}/{f.n}")


if __name__ == "__main__":
    main()
