"""The verdict read on the frontier's own points (compare/ondata.py): inside the data an interpolated M
with a Student t interval that covers, beyond it a bound decided on the data with confidence whose value
is a lower confidence limit, runs inside counted; with two frontier FLOPs a reading, not "no verdict";
the fit's own error per configuration and FLOPs point. The coverage and false-bound figures come from
the seeded simulation in scripts/simulate_verdict.py."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import linear_run
from scipy import stats

from mltrain.tools.compare import compare_dirs
from mltrain.tools.compare.ondata import read_on_data, run_on_data
from mltrain.tools.compare.statistics import FrontierPoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import simulate_verdict as simulate  # noqa: E402 - a measurement script, imported from scripts/

E, A, ALPHA = 2.0, 3e4, 0.35
BUDGETS = {0.125: 1e13, 0.25: 2e13, 0.5: 4e13, 1.0: 8e13}
CONTROL = "coarsening=evenodd,multilevel.control=schedule"


def law(flops: float) -> float:
    return E + A * flops ** -ALPHA


def single(root: Path, seed, budget: float, loss: float, flops: float | None = None) -> None:
    label = "experiment=single" + (f",train.budget={budget}" if budget != 1.0 else "")
    linear_run(root, f"s_{budget}_{seed}", "single", label, seed, flops=flops or BUDGETS[budget], val=loss, budget=budget)


def multilevel(root: Path, seed, flops: float, loss: float) -> None:
    linear_run(root, f"ml_{seed}", "multilevel", "experiment=multilevel", seed, flops=flops, val=loss)


def arm(report: dict, kind: str) -> dict:
    (a,) = [a for a in report["arms"] if a["run_kind"] == kind]
    return a


ENV = [FrontierPoint(1.0, 4.0), FrontierPoint(2.0, 3.5), FrontierPoint(4.0, 3.0), FrontierPoint(8.0, 2.5)]


# ---------------------------------------------------------------------------------------------
# ondata alone


def test_inside_the_data_the_reading_is_interpolated_with_a_t_interval_worked_by_hand():
    # losses 3.25, 3.0, 2.75 at 2 FLOPs: F* = 2·√2, 4, 4·√2 (halfway in log FLOPs); log M = 0.5, 1, 1.5 · ln 2
    runs = [run_on_data(ENV, True, s, 2.0, loss) for s, loss in enumerate((3.25, 3.0, 2.75))]
    r = read_on_data(runs)
    logs = np.array([0.5, 1.0, 1.5]) * math.log(2)
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    assert r.kind == "interpolated" and r.n == 3 and r.dof == 2 and (r.n_below, r.n_above) == (0, 0)
    assert (r.M, r.M_lo, r.M_hi) == pytest.approx((2.0, math.exp(logs.mean() - half), math.exp(logs.mean() + half)))


def test_beyond_the_data_is_decided_on_the_data_with_confidence():
    # every run well below the lowest frontier loss: beyond with confidence, M > C_max / C_run = 8 / 2
    far = [run_on_data(ENV, True, s, 2.0, 2.3 + 0.01 * s) for s in range(4)]
    r = read_on_data(far, ENV)
    assert r.kind == "bound" and r.gap_upper < 0 and r.M_lo == pytest.approx(4.0)
    # runs straddling the lowest loss: not beyond with confidence, no bound (the fit or a data-only limit reads them)
    straddle = [run_on_data(ENV, True, s, 2.0, loss) for s, loss in enumerate((2.45, 2.52, 2.48, 2.55))]
    r = read_on_data(straddle, ENV)
    assert r.kind is None and r.n_below == 2 and r.gap_upper > 0 and "not beyond its data" in r.why
    assert r.lower_limit < 4.0  # the data-only limit: below every run's reading or C_max / C_run
    # one run is never beyond with confidence
    assert read_on_data(far[:1], ENV).kind is None


def test_runs_inside_count_in_the_bound():
    # three seeds far beyond, one inside reading M = 4·√2 / 4 ≈ 1.41 at 4 FLOPs: the bound is no larger
    runs = [run_on_data(ENV, True, s, 4.0, 2.2) for s in range(3)] + [run_on_data(ENV, True, 3, 4.0, 2.75)]
    r = read_on_data(runs, ENV)
    assert r.kind in ("bound", None) and r.lower_limit < math.sqrt(2)


@pytest.mark.parametrize("seeds,least", [(4, 0.93), (6, 0.94)])
def test_the_headline_interval_covers_and_false_bounds_are_rare_in_simulation(seeds, least):
    """Seeded: 1000 synthetic data sets per figure on a well-specified frontier (scripts/simulate_verdict.py), the true M
    inside the data for coverage and 2% inside its largest FLOPs for false bounds."""
    covered = simulate.coverage(seeds, 1000, seed=1)
    assert covered.rate >= least, covered
    false = simulate.false_bounds(seeds, 1000, seed=2)
    assert false.rate <= 0.05 and false.confident / false.n <= 0.05, false


# ---------------------------------------------------------------------------------------------
# through mltrain-compare


def test_three_runs_inside_the_frontiers_points_get_no_bound(tmp_path):
    """The issue's case: losses inside the frontier's points, the fitted curve read past C_max (a frontier
    whose top point lies below its law, so the robust fit passes above it). The old rule printed
    "M > 2.67 (beyond the frontier's data)" here, above the 2.56 the points give."""
    for s in range(3):
        for b, f in BUDGETS.items():
            single(tmp_path, s, b, law(f) - (0.1 if b == 1.0 else 0.0))  # the top point far better than the law
        multilevel(tmp_path, s, 3e13, law(8e13) - 0.09 + 0.003 * s)  # just above the top point: inside
    m = arm(compare_dirs([tmp_path], plot=False), "multilevel")["multiplier"]
    assert m["extrapolated"]  # the fitted curve reads the arm past C_max ...
    assert m["on_data"]["kind"] == "interpolated" and m["bound"] is None  # ... the points do not
    assert m["headline"]["kind"] == "interpolated" and m["headline"]["M"] < 8 / 3
    assert m["headline"]["M"] == pytest.approx(m["M_interpolated"])


@pytest.mark.parametrize("where", ["inside", "beyond"])
def test_two_frontier_flops_give_a_reading_from_the_data_not_no_verdict(tmp_path, where):
    for s in range(4):
        for b in (0.5, 1.0):
            single(tmp_path, s, b, law(BUDGETS[b]) + 0.002 * s)
        loss = law(6e13) if where == "inside" else law(2e14)
        multilevel(tmp_path, s, 3e13, loss + 0.002 * s)
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=True)
    a = arm(report, "multilevel")
    m = a["multiplier"]
    assert not report["frontier"]["fit"]["available"] and not m["available"]  # no power law through 2 points
    row = next(line for line in (tmp_path / "out" / "comparison.md").read_text().splitlines()
               if line.startswith("| `multilevel"))
    if where == "inside":
        assert m["headline"]["kind"] == "interpolated" and m["headline"]["M"] == pytest.approx(2.0, rel=0.05)
        assert a["verdict"] == "saves FLOPs" and "read on the frontier's points" in row
    else:
        assert m["headline"]["kind"] == "bound" and m["bound"]["value"] == pytest.approx(8 / 3)
        assert a["verdict"] == "saves FLOPs (M only bounded)" and "M > 2.67" in row
    assert (tmp_path / "out" / "comparison.png").stat().st_size > 0


def test_the_fits_error_is_per_configuration_and_flops_point_and_unknown_on_three(tmp_path):
    for s in range(4):
        for b, f in BUDGETS.items():
            single(tmp_path, s, b, law(f))
        # the control at the largest budget's FLOPs, a little off the law: its own reading, not mixed in
        linear_run(tmp_path, f"ctrl_{s}", "schedule_control", CONTROL + ",train.budget=0.75", s, flops=6e13,
                   val=law(6e13) - 0.004, budget=0.75)
        multilevel(tmp_path, s, 3e13, law(5e13))
    error = compare_dirs([tmp_path], plot=False)["frontier"]["fit_error"]
    kinds = {(e["run_kind"], e["flops"]) for e in error["per_budget"]}
    assert ("schedule_control", 6e13) in kinds and ("single", 8e13) in kinds and len(error["per_budget"]) == 5
    assert all(e["n"] == 4 and e["label"] for e in error["per_budget"])
    three = tmp_path / "three"
    for s in range(4):
        for b in (0.25, 0.5, 1.0):
            single(three, s, b, law(BUDGETS[b]) + 0.001 * s)
        multilevel(three, s, 3e13, law(5e13))
    error = compare_dirs([three], plot=False)["frontier"]["fit_error"]
    assert not error["available"] and error["why"].startswith("unknown: the frontier has 3 distinct FLOPs")


def test_the_plot_draws_an_arm_whose_losses_are_equal_across_seeds(tmp_path):
    for s in range(3):
        for b, f in BUDGETS.items():
            single(tmp_path, s, b, law(f) + 0.001 * s)
        # the same loss on every seed, whose mean over 3 comes out one rounding below it: a negative error bar
        multilevel(tmp_path, s, 3e13, 3.4688269151261926)
    assert float(np.mean([3.4688269151261926] * 3)) < 3.4688269151261926
    compare_dirs([tmp_path], out=tmp_path / "out", plot=True)
    assert (tmp_path / "out" / "comparison.png").stat().st_size > 0
