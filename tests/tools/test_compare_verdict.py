"""The verdict's statistics on constructed runs whose answers are worked out by hand: intervals, the
budget frontier, the blocks-only FLOP convention, fixed budgets, and runs that must never count
(diverged, unfinished, interrupted, other data)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DATA, HELD, linear_run, report_of

from mltrain.tools.compare import main
from mltrain.tools.compare.statistics import interval
from mltrain.tools.compare.statistics import FrontierPoint, frontier_flops, frontier_loss, lower_envelope


T975 = {2: 4.302652729911275, 4: 2.7764451051977987}  # Student t quantiles (tables), by d.f.


BASE = "experiment=single"


def frontier(root: Path, seeds, shift=lambda s: 0.0) -> None:
    """Single-level runs ending at 1, 2, 4, 8 (x 1e13) FLOPs with final val loss 4.0, 3.5, 3.0, 2.5
    (0.5 per doubling), plus a dominated budget (6e13 -> 3.2), each shifted by shift(seed)."""
    for s in seeds:
        for budget, f, loss in ((0.125, 1e13, 4.0), (0.25, 2e13, 3.5), (0.5, 4e13, 3.0), (0.75, 6e13, 3.2),
                                (1.0, 8e13, 2.5)):
            label = BASE if budget == 1.0 else f"{BASE},train.budget={budget}"
            linear_run(root, f"b{budget}_s{s}", "single", label, s, flops=f, val=loss + shift(s), budget=budget)


def by_label(entries: list[dict], label: str) -> dict:
    (e,) = [e for e in entries if e["label"] == label]
    return e


# ---------------------------------------------------------------------------------------------
# statistics alone


def test_interval_is_the_t_interval_worked_by_hand():
    iv = interval([0.30, 0.32, 0.34, 0.36, 0.38])
    sem = np.std([0.30, 0.32, 0.34, 0.36, 0.38], ddof=1) / math.sqrt(5)  # 0.0141421
    assert iv.n == 5 and iv.mean == pytest.approx(0.34)
    assert (iv.ci_low, iv.ci_high) == pytest.approx((0.34 - T975[4] * sem, 0.34 + T975[4] * sem))
    assert iv.warnings == ()  # 5 seeds, interval above 0


def test_two_seeds_of_minus_47_and_plus_83_percent_are_flagged():
    iv = interval([-0.47, 0.83], zero_means="no saving")
    assert iv.mean == pytest.approx(0.18)
    half = 12.706204736174707 * 1.3 / 2  # t(0.975, 1) * |a - b| / 2
    assert (iv.ci_low, iv.ci_high) == pytest.approx((0.18 - half, 0.18 + half))
    assert any("fewer than 3" in w for w in iv.warnings)
    assert any("contains 0" in w and "no saving" in w for w in iv.warnings)
    one = interval([0.4])
    assert one.n == 1 and one.ci_low is None and "only 1 seed" in one.warnings[0]
    assert interval([]).n == 0 and interval([math.nan, None]).n == 0  # non-finite values never count


def test_frontier_envelope_interpolates_in_log_flops_and_says_when_outside():
    pts = [FrontierPoint(1e13, 4.0), FrontierPoint(8e13, 2.5), FrontierPoint(2e13, 3.5),
           FrontierPoint(6e13, 3.2), FrontierPoint(4e13, 3.0)]
    env = lower_envelope(pts)
    assert [p.flops for p in env] == [1e13, 2e13, 4e13, 8e13]  # 6e13 ended worse than 4e13: dominated
    # 2.75 is halfway (in loss) from 4e13 (3.0) to 8e13 (2.5): halfway in log FLOPs, 4e13 * sqrt(2)
    assert frontier_flops(env, 2.75).flops == pytest.approx(4e13 * math.sqrt(2))
    assert frontier_flops(env, 3.5).flops == pytest.approx(2e13)
    below = frontier_flops(env, 2.4)
    assert below.flops is None and below.side == "below" and below.bound_flops == 8e13
    above = frontier_flops(env, 4.2)
    assert above.flops is None and above.side == "above" and above.bound_flops == 1e13
    assert frontier_loss(env, 4e13 * math.sqrt(2)) == pytest.approx(2.75)
    assert frontier_loss(env, 9e13) is None and frontier_loss(env, 5e12) is None


# ---------------------------------------------------------------------------------------------
# the frontier through mltrain-compare


def test_frontier_savings_per_seed_and_interval(tmp_path, capsys):
    root = tmp_path / "runs"
    frontier(root, (0, 1, 2, 3), shift=lambda s: 0.1 if s == 1 else 0.0)
    ml = "experiment=multilevel"
    # All end at 5e13 FLOPs (4e13 in the blocks-only convention).
    finals = {0: 2.75, 1: 3.1, 2: 2.5, 3: 2.4}
    for s, loss in finals.items():
        linear_run(root, f"ml_s{s}", "multilevel", ml, s, flops=5e13, flops_blocks=4e13, val=loss)
    report, md = report_of(root, capsys)
    assert report["baseline"]["label"] == BASE
    fr = report["frontier"]
    assert fr["budgets"] == [0.125, 0.25, 0.5, 0.75, 1.0]
    assert fr["dominated_budgets"] == [0.75]
    assert {c["label"] for c in report["configurations"] if c["in_frontier"]} == {
        BASE, *(f"{BASE},train.budget={b}" for b in (0.125, 0.25, 0.5, 0.75))}

    e = by_label(report["vs_frontier"], ml)
    per = {p["seed"]: p for p in e["per_seed"]}
    assert all(p["paired"] for p in per.values())
    # seed 0: F* = 4e13 * sqrt(2) -> saving 1 - 5 / (4 sqrt 2); blocks-only: 1 - 4 / (4 sqrt 2)
    assert per[0]["frontier_flops"] == pytest.approx(4e13 * math.sqrt(2))
    assert per[0]["saving"] == pytest.approx(1 - 5 / (4 * math.sqrt(2)))
    assert per[0]["saving_blocks"] == pytest.approx(1 - 1 / math.sqrt(2))
    # loss gap at 5e13: frontier there is 3.0 - 0.5 * log2(5/4)
    assert per[0]["loss_gap"] == pytest.approx(2.75 - (3.0 - 0.5 * math.log2(5 / 4)))
    # seed 1 has its own frontier, 0.1 higher: 3.1 sits on its 4e13 budget -> saving 1 - 5/4
    assert per[1]["frontier_flops"] == pytest.approx(4e13) and per[1]["saving"] == pytest.approx(-0.25)
    assert per[2]["saving"] == pytest.approx(1 - 5 / 8)
    # seed 3 beats the longest budget: outside the frontier, only a bound, left out of the interval
    assert per[3]["outside"] == "below" and per[3]["saving"] is None
    assert per[3]["saving_bound"] == [">", pytest.approx(1 - 5 / 8)]
    assert e["n_outside"] == {"below": 1, "above": 0}

    values = [1 - 5 / (4 * math.sqrt(2)), -0.25, 1 - 5 / 8]
    mean, sem = np.mean(values), np.std(values, ddof=1) / math.sqrt(3)
    s = e["saving"]
    assert s["n"] == 3 and s["mean"] == pytest.approx(mean)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((mean - T975[2] * sem, mean + T975[2] * sem))
    assert any("outside the frontier" in w for w in s["warnings"])
    assert any("contains 0" in w for w in s["warnings"])

    (v,) = report["verdict"]
    assert v["basis"] == "frontier" and v["verdict"] == "no evidence either way"
    assert v["saving"] == s
    # the old figure stays beside it, named as such
    assert "vs the one full-length single-level baseline" in md and "saving vs the one baseline" in md
    assert "outside the frontier (below the longest budget)" in md and "> 37.5%" in md


def test_a_consistent_saving_is_a_saving(tmp_path, capsys):
    root = tmp_path / "runs"
    seeds = range(5)
    frontier(root, seeds)
    # every seed reaches 2.75 (F* = 4e13 sqrt 2 = 5.657e13) with 4e13, 4.2e13, ... FLOPs
    for s in seeds:
        linear_run(root, f"ml_s{s}", "multilevel", "experiment=multilevel", s, flops=(4.0 + 0.2 * s) * 1e13, val=2.75)
    report, md = report_of(root, capsys)
    (v,) = report["verdict"]
    expected = [1 - (4.0 + 0.2 * s) / (4 * math.sqrt(2)) for s in seeds]
    assert v["saving"]["mean"] == pytest.approx(np.mean(expected))
    assert v["saving"]["ci_low"] > 0 and v["saving"]["warnings"] == []
    assert v["verdict"] == "saves FLOPs"
    assert "saves FLOPs" in md


def test_without_a_budget_sweep_the_verdict_uses_the_one_baseline(tmp_path, capsys):
    root = tmp_path / "runs"
    for s in (0, 1, 2):
        linear_run(root, f"b{s}", "single", BASE, s, flops=1e14, val=3.0)
        # val falls linearly from 4.0 to 3.5 over 5e13 FLOPs: it never reaches 3.0
        linear_run(root, f"m{s}", "multilevel", "experiment=multilevel", s, flops=5e13, val=3.5)
    report, md = report_of(root, capsys)
    assert not report["frontier"]["available"] and report["vs_frontier"] == []
    (v,) = report["verdict"]
    assert v["basis"] == "one baseline" and v["verdict"] == "no seed gives a value"
    assert "No budget frontier" in md


def test_fixed_budget_table_is_paired_by_seed(tmp_path, capsys):
    root = tmp_path / "runs"
    for s in (0, 1, 2):
        linear_run(root, f"b{s}", "single", BASE, s, flops=1e14, val=3.0 + 0.1 * s)
        linear_run(root, f"m{s}", "multilevel", "experiment=multilevel", s, flops=1e14, val=2.9 + 0.1 * s)
    report, _ = report_of(root, capsys)
    fb = report["fixed_flops"]
    assert fb["flops"] == pytest.approx([2.5e13, 5e13, 7.5e13, 1e14])
    row = by_label(fb["rows"], "experiment=multilevel")
    # val(F) = final + 1 - F / 1e14: at half the FLOPs final + 0.5; the paired difference is -0.1 for
    # every seed and every budget
    assert row["cells"][1]["mean_loss"] == pytest.approx(np.mean([3.4, 3.5, 3.6]))
    for cell in row["cells"]:
        assert cell["diff"]["mean"] == pytest.approx(-0.1)
        assert cell["diff"]["ci_low"] == pytest.approx(-0.1) and cell["diff"]["ci_high"] == pytest.approx(-0.1)


# ---------------------------------------------------------------------------------------------
# runs that must never count


def test_diverged_unfinished_interrupted_and_other_data_are_listed_and_left_out(tmp_path, capsys):
    root = tmp_path / "runs"
    for s in (0, 1, 2):
        linear_run(root, f"b{s}", "single", BASE, s, flops=1e14, val=3.0)
    ml = "experiment=multilevel"
    linear_run(root, "m0", "multilevel", ml, 0, flops=1e14, val=2.5)
    # diverged: NaN from the 3rd row on; its last finite loss is early and low-looking
    linear_run(root, "m1", "multilevel", ml, 1, flops=1e14, val=0.1, nan_at=3)
    linear_run(root, "m2", "multilevel", ml, 2, flops=1e14, val=2.0, write_summary=False)
    linear_run(root, "m3", "multilevel", ml, 3, flops=1e14, val=2.0, summary={"status": "interrupted"})
    linear_run(root, "m4", "multilevel", ml, 4, flops=1e14, val=2.0,
             summary={"data": {**DATA, "description": "text README.md, bytes: 9 train / 1 val tokens"}})
    linear_run(root, "m5", "multilevel", ml, 5, flops=1e14, val=2.0, summary={"held_out": {**HELD, "fingerprint": "zzz"}})
    linear_run(root, "m6", "multilevel", ml, 6, flops=1e14, val=2.0, summary={"status": "diverged"})
    report, md = report_of(root, capsys)
    excluded = {Path(e["run"]).name: e for e in report["excluded"]}
    assert set(excluded) == {"m1", "m2", "m3", "m4", "m5", "m6"}
    assert excluded["m1"]["status"] == "diverged" and "nan" in excluded["m1"]["reason"].lower()
    assert excluded["m2"]["status"] == "unfinished" and "summary.json" in excluded["m2"]["reason"]
    assert excluded["m3"]["status"] == "interrupted"
    assert excluded["m4"]["status"] == "mismatch" and "different data" in excluded["m4"]["reason"]
    assert excluded["m5"]["status"] == "mismatch" and "held-out set" in excluded["m5"]["reason"]
    assert excluded["m6"]["status"] == "diverged"
    e = by_label(report["vs_baseline"], ml)
    assert [p["seed"] for p in e["per_seed"]] == [0]  # only the finished run is compared
    assert "## Left out" in md and "**diverged**" in md and "**unfinished**" in md


def test_a_diverged_baseline_is_named_when_no_baseline_is_left(tmp_path, capsys):
    root = tmp_path / "runs"
    linear_run(root, "b0", "single", BASE, 0, flops=1e14, val=3.0, nan_at=2)
    linear_run(root, "m0", "multilevel", "experiment=multilevel", 0, flops=1e14, val=2.5)
    rc = main([str(root)])
    err = capsys.readouterr().err
    (line,) = [w for w in err.splitlines() if "no baseline" in w]
    assert rc == 0 and line.startswith("mltrain-compare: warning: ") and "diverged" in line
