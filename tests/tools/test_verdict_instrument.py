"""The verdict's instrument on constructed runs: an arm beyond the frontier's data gets a bound, not a
point; a flat frontier gives an unbounded upper end; the joint (shifted-frontier) fit; the schedule
control as a frontier candidate and as an arm; the frontier's gain per tuning dimension; the ladder's
trend weighing its rungs by their intervals (and a fitted reading's fit error), bounds left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import linear_run

from mltrain.tools.compare import FitError, Multiplier, Report, compare_dirs
from mltrain.tools.compare.powerlaw import fit_power_law, fit_shift
from mltrain.tools.study import ladder

E, A, ALPHA = 2.0, 3e4, 0.35
BUDGETS = {0.125: 1e13, 0.25: 2e13, 0.5: 4e13, 1.0: 8e13}
CONTROL = "coarsening=evenodd,multilevel.control=schedule"


def law(flops: float) -> float:
    return E + A * flops ** -ALPHA


def single(root: Path, seed, budget: float, loss: float, extra: str = "") -> None:
    label = ",".join(p for p in ("experiment=single", extra, f"train.budget={budget}" if budget != 1.0 else "") if p)
    linear_run(root, f"s{extra}_{budget}_{seed}", "single", label, seed, flops=BUDGETS[budget], val=loss, budget=budget)


def lawful_frontier(root: Path, seeds, noise: float = 0.0, rng=None) -> None:
    for s in seeds:
        for b, f in BUDGETS.items():
            single(root, s, b, law(f) + (rng.normal(0, noise) if rng is not None else 0.0))


def multilevel(root: Path, seed, flops: float, loss: float) -> None:
    linear_run(root, f"ml_{seed}", "multilevel", "experiment=multilevel", seed, flops=flops, val=loss)


def arm(report: dict, kind: str) -> dict:
    (a,) = [a for a in report["arms"] if a["run_kind"] == kind]
    return a


def test_an_arm_beyond_the_frontiers_data_is_a_bound_not_a_point(tmp_path):
    lawful_frontier(tmp_path, range(4))
    for s in range(4):  # at 6e13 FLOPs the loss the frontier reaches at 1.6e14: past its largest 8e13
        multilevel(tmp_path, s, 6e13, law(1.6e14 * (1 + 0.05 * s)))
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    m = arm(report, "multilevel")["multiplier"]
    assert m["bound"] == {"kind": "lower", "value": pytest.approx(8 / 6), "what": m["bound"]["what"]}
    assert m["headline"]["kind"] == "bound" and m["headline"]["M"] is None
    assert m["M_hi"] is None and m["M_hi_unbounded"] and m["extrapolated"]  # the keys the study reads, kept
    assert m["n_degenerate"] == m["n_resamples"]  # beyond every draw's data
    md = (tmp_path / "out" / "comparison.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| `multilevel"))
    assert "M > 1.33" in row and "> 25.0%" in row
    assert arm(report, "multilevel")["verdict"] == "saves FLOPs (M only bounded)"


def test_a_flat_top_of_the_frontier_gives_an_unbounded_upper_end_not_a_number(tmp_path):
    rng = np.random.default_rng(1)
    for s in range(5):  # the frontier flattens past 2e13 FLOPs: its top budgets are within noise
        for b, f in BUDGETS.items():
            single(tmp_path, s, b, law(min(f, 2e13)) + rng.normal(0, 0.01))
        multilevel(tmp_path, s, 1.5e13, law(2e13) + 0.02 + rng.normal(0, 0.01))  # on the flat part
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    m = arm(report, "multilevel")["multiplier"]
    assert m["M_lo"] is not None and m["M_hi"] is None and m["M_hi_unbounded"] is True
    assert m["degenerate_share"] > 0.025 and any("upper end is unbounded" in w for w in m["warnings"])
    assert report["frontier"]["fit"]["degenerate"].startswith("the floor E")
    # one run lies below its seed's lowest frontier loss (not all, not with confidence), and the fit's own
    # error is far wider than ±5%: the data-only bound leads, the lower confidence limit of the censored M
    on_data = m["on_data"]
    assert on_data["kind"] is None and on_data["n_below"] == 1 and on_data["gap_upper"] > 0
    assert m["headline"]["kind"] == "bound" and m["headline"]["M_lo"] == pytest.approx(on_data["lower_limit"])
    assert 1 < m["bound"]["value"] < m["M_interpolated"] and m["bound"]["what"].startswith("some runs below")
    row = next(line for line in (tmp_path / "out" / "comparison.md").read_text().splitlines()
               if line.startswith("| `multilevel"))
    assert f"M > {m['bound']['value']:.3g} (n=5, data only: 1 of 5 runs below" in row
    # what comparison.json calls degenerate, comparison.md says: the fit at its bound, the draws that were
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert f"The fit is degenerate: {report['frontier']['fit']['degenerate']}" in md
    assert f"{m['n_degenerate']} degenerate bootstrap draws ({100 * m['degenerate_share']:.1f}%" in md


def test_the_joint_fit_recovers_a_known_shift_and_a_fit_at_its_bounds_says_so():
    flops = np.array(list(BUDGETS.values()) * 4)
    fit = fit_power_law(flops, [law(f) for f in flops])
    assert fit.available and fit.degenerate is None
    arm_flops = [3e13] * 4
    m = fit_shift((flops, [law(f) for f in flops]), (arm_flops, [law(1.7 * f) for f in arm_flops]), fit.law)
    assert m == pytest.approx(1.7, rel=1e-3)
    flat = fit_power_law([1e13, 2e13, 4e13, 8e13], [3.0, 2.9, 2.9001, 2.9])
    assert flat.law is not None and flat.degenerate is not None  # E at the lowest loss, or α at a bound


def test_the_schedule_control_is_a_frontier_candidate_and_an_arm_against_the_frontier_without_it(tmp_path):
    lawful_frontier(tmp_path, range(5))
    for s in range(5):
        # the control at 1e14 FLOPs beats every plain budget: the frontier's new end
        linear_run(tmp_path, f"ctrl_{s}", "schedule_control", CONTROL, s, flops=1e14, val=law(1.2e14))
        multilevel(tmp_path, s, 6e13, law(9e13) + 0.001 * s)  # a loss the frontier reaches between 8e13 and 1e14
    report = compare_dirs([tmp_path], select_seeds=[0], plot=False)
    fr = report["frontier"]
    ctrl_points = [p for p in fr["points"] if p["run_kind"] == "schedule_control"]
    assert {p["seed"] for p in ctrl_points} == {1, 2, 3, 4} and fr["fit"]["flop_range"] == [1e13, 1e14]
    ctrl = arm(report, "schedule_control")
    assert ctrl["multiplier"]["M"] == pytest.approx(1.2, rel=1e-3)  # against the plain frontier: law(1.2e14) at 1e14
    assert ctrl["multiplier"]["bound"]["value"] == pytest.approx(0.8)  # 1.2e14 is past that frontier's 8e13
    ml = arm(report, "multilevel")["multiplier"]
    assert ml["bound"] is None and 1.3 < ml["M"] < 1.6  # inside the frontier with the control (9e13 / 6e13 on the law)
    assert ml["M_joint"] == pytest.approx(ml["M"], rel=0.02)
    # per budget, what was tried and won; what the control added to the frontier
    at_one = next(b for b in fr["tried_per_budget"] if b["budget"] == 1.0)["settings"]
    assert {s["run_kind"] for s in at_one} == {"single", "schedule_control"} and all(s["on_frontier"] for s in at_one)
    (gain,) = [g for g in fr["gains"] if g["dimension"] == "schedule control"]
    assert gain["gain_M"] > 1 and gain["arms"][arm(report, "multilevel")["arm"]]["bound"] == pytest.approx(8 / 6)  # past 8e13 without it


def test_the_gain_from_a_second_warmup_length_is_reported(tmp_path):
    for s in range(4):
        for b, f in BUDGETS.items():  # the short warm-up is worth 1.3x the compute at every budget
            single(tmp_path, s, b, law(f), "schedule.warmup_steps=200")
            single(tmp_path, s, b, law(1.3 * f), "schedule.warmup_steps=50")
    report = compare_dirs([tmp_path], select_seeds=[0], plot=False)
    (gain,) = [g for g in report["frontier"]["gains"] if g["dimension"] == "schedule.warmup_steps"]
    assert gain["restricted_to"].startswith("one schedule.warmup_steps") and gain["fit_available"]
    # either single warm-up frontier: the full one needs 1.3x less compute, or exactly as much
    assert gain["gain_M"] == pytest.approx(1.3, rel=0.02) or gain["gain_M"] == pytest.approx(1.0, abs=0.02)
    kept = [s for b in report["frontier"]["tried_per_budget"] for s in b["settings"] if s["kept"]]
    assert {s["settings"]["schedule.warmup_steps"] for s in kept} == {50}


def multiplier(m: float, spread: float = 0.03) -> dict:
    return {"available": True, "M": m, "M_lo": m * (1 - spread), "M_hi": m * (1 + spread), "bound": None,
            "M_hi_unbounded": False}


@pytest.mark.parametrize("ms", [(1.17, 1.25, 1.15), (1.17, 1.25, 1.15, 1.30)])
def test_a_ladder_that_goes_up_and_down_cannot_tell(ms):
    trend = ladder.fit_trend([(x, Multiplier.from_json(multiplier(m)), 6) for x, m in zip((4, 8, 12, 16), ms)])
    assert trend.verdict == "cannot tell" and trend.monotone is None
    sentence = ladder.trend_sentence("multilevel", trend, "depth")
    assert "cannot tell" in sentence and f"{trend.slope:+.3f}" in sentence


def test_the_trend_weighs_the_rungs_by_their_intervals_and_fit_error_and_skips_bounds():
    rungs = []
    for x in (4, 8, 12):  # M = 1.1 (x / 4)^0.2: on a straight line in log-log
        m = 1.1 * (x / 4) ** 0.2
        rungs.append((x, Multiplier.from_json(multiplier(m)), 6, None))
    assert ladder.fit_trend(rungs).verdict == "growing"
    wide = [(x, m, k, FitError.from_json({"available": True, "M_lo": 0.8, "M_hi": 1.25})) for x, m, k, _ in rungs]
    assert ladder.fit_trend(wide).verdict == "cannot tell"  # a ±25% fit error swamps the slope
    bounded = rungs + [(16, Multiplier.from_json({**multiplier(1.5), "bound": {"kind": "lower", "value": 1.4}}), 6, None)]
    t = ladder.fit_trend(bounded)
    assert t.n_scales == 3 and t.excluded == (ladder.ExcludedRung(16, "M only bounded (M > 1.4)"),)
    assert "not used as points: 16: M only bounded" in ladder.trend_sentence("multilevel", t, "depth")


def test_the_ladder_report_shows_a_bound_and_an_unbounded_end_and_leaves_them_out_of_the_trend(tmp_path):
    labels = {"single": "experiment=single", "multilevel": "experiment=multilevel"}
    rungs = {4: multiplier(1.10), 8: multiplier(1.20), 12: {**multiplier(1.3), "M_hi": None, "M_hi_unbounded": True},
             16: {**multiplier(1.6), "bound": {"kind": "lower", "value": 1.45}, "extrapolated": True}}
    results = []
    for x, m in rungs.items():
        arms = [{"label": labels["single"], "run_kind": "single", "eval_seeds": [1, 2, 3, 4]},
                {"label": labels["multilevel"], "run_kind": "multilevel", "eval_seeds": [1, 2, 3, 4], "multiplier": m}]
        results.append(ladder.ScaleResult(f"L{x}", 10_000 * x, 100, 8.0, labels, comparison=Report.from_json({"arms": arms, "warnings": []}),
                                          axis_value=x))
    report = ladder.ladder_report("t", ["single", "multilevel"], "single", results, [], "depth")
    (trend,) = report.trends
    assert trend.verdict == "too few scales to tell" and len(trend.excluded) == 2
    ladder.write_ladder(report, tmp_path / "ladder")
    md = (tmp_path / "ladder.md").read_text()
    assert "| M > 1.450 | > 31.0% |" in md and "| 1.300 [1.261, ∞) |" in md
    assert "not used as points: 12: its interval's upper end is unbounded; 16: M only bounded" in md
    assert (tmp_path / "ladder.png").stat().st_size > 0


def test_the_report_is_its_typed_results_written_as_json_and_reads_back_into_them(tmp_path):
    """comparison.json is the typed report's to_json (compare_dirs' dict too), and from_json of it gives the
    same results: every key and value, the bootstrap's draws and an arm beyond the data's bound included."""
    import json

    from mltrain.tools.compare import compare_report

    lawful_frontier(tmp_path / "runs", range(4), noise=0.002, rng=np.random.default_rng(0))
    for s in range(4):
        multilevel(tmp_path / "runs", s, 3e13, law(4e13 * (1 + 0.05 * s)))
    report = compare_report([tmp_path / "runs"], out=tmp_path / "out", plot=False)
    saved = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert json.loads(json.dumps(report.to_json())) == saved
    assert compare_dirs([tmp_path / "runs"], out=tmp_path / "out", plot=False) == report.to_json()
    again = Report.from_json(saved)
    assert again.to_json() == saved and again.arms == report.arms and again.frontier.fit_error == report.frontier.fit_error
    (ml,) = [a for a in again.arms if a.run_kind == "multilevel"]
    assert ml.multiplier.draws and ml.multiplier.headline is not None and ml.final_val_loss.n == 4
