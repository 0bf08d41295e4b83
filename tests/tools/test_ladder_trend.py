"""The ladder's trend (tools/study/ladder.py) moves continuously with the rungs' M: a half-percent move of
one rung cannot flip its word (the old interval was widened only past χ² = 1, then by t at 1 df, and
flipped on such a move); beside the slope, the first-to-last contrast with its interval and each step
between neighbouring rungs, "unresolved" below twice its standard error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mltrain.tools.compare import Multiplier
from mltrain.tools.study import ladder


def per_run(m: float, spread: float) -> Multiplier:
    """A rung as an older report has it: the per-run M with an interval, no headline."""
    return Multiplier.from_json({"available": True, "M": m, "M_lo": m / (1 + spread), "M_hi": m * (1 + spread)})


def interpolated(m: float, se: float = 0.04, seeds: int = 6) -> Multiplier:
    """A rung led by its interpolated M: Student t interval on log M, `se`, seeds − 1 df."""
    q = stats.t.ppf(0.975, seeds - 1)
    return Multiplier.from_json({"available": True, "M": m, "headline": {
        "kind": "interpolated", "M": m, "M_lo": m * math.exp(-q * se), "M_hi": m * math.exp(q * se), "log_se": se,
        "dof": seeds - 1, "n": seeds}})


@pytest.mark.parametrize("m4,m12,spread", [(1.11, 1.51, 0.03), (1.10, 1.64, 0.02), (1.10, 1.51, 0.04)])
def test_a_half_percent_move_of_one_rung_cannot_change_the_word(m4, m12, spread):
    """Ladders at 4, 8, 12 blocks on which the old trend flipped between "growing" and "cannot tell" when
    the 8-block M moved from 1.375 to 1.380 (the issue's case)."""
    before, after = (ladder.fit_trend([(4, per_run(m4, spread), 6), (8, per_run(m8, spread), 6),
                                       (12, per_run(m12, spread), 6)]) for m8 in (1.375, 1.380))
    assert before.verdict == after.verdict
    assert abs(after.slope_lo - before.slope_lo) < 0.05 and abs(after.slope_hi - before.slope_hi) < 0.05


def test_the_slope_interval_moves_continuously_with_one_rung():
    ends = []
    for m8 in np.geomspace(1.30, 1.46, 24):  # 0.5% apart, through χ² = 1 and far beyond it
        t = ladder.fit_trend([(4, interpolated(1.25), 6), (8, interpolated(m8), 6), (12, interpolated(1.52), 6)])
        ends.append((t.slope_lo, t.slope_hi))
    jumps = np.abs(np.diff(np.array(ends), axis=0))
    assert jumps.max() < 0.06, jumps.max()  # a widening switched on at χ² = 1 with t(1 df) would jump by ~0.5


def test_steps_below_twice_their_error_are_unresolved_and_the_contrast_has_its_interval():
    se = 0.04
    rungs = [(4, interpolated(1.20, se), 6), (8, interpolated(1.23, se), 6), (12, interpolated(1.45, se), 6),
             (16, interpolated(1.47, se), 6)]
    t = ladder.fit_trend(rungs)
    step_se = math.sqrt(2) * se
    assert [s.word for s in t.steps] == ["unresolved", "up", "unresolved"]  # 0.025 and 0.014 < 2 · 0.057 < 0.164
    assert [s.se for s in t.steps] == pytest.approx([step_se] * 3)
    assert t.contrast == pytest.approx(math.log(1.47 / 1.20))
    half = stats.t.ppf(0.975, 10) * step_se  # Satterthwaite: two rungs of 5 df, equal errors: 10 df
    assert (t.contrast_lo, t.contrast_hi) == pytest.approx((t.contrast - half, t.contrast + half))
    assert t.verdict == "growing" and t.monotone == "growing"  # no step down; unresolved ones are no veto
    sentence = ladder.trend_sentence("multilevel", t, "depth")
    assert f"first to last log M {t.contrast:+.3f} [{t.contrast_lo:+.3f}, {t.contrast_hi:+.3f}]" in sentence
    assert "steps 4→8 unresolved, 8→12 up, 12→16 unresolved" in sentence
    saved = t.to_json()
    assert saved["steps"][1] == {"x_from": 8, "x_to": 12, "diff": pytest.approx(math.log(1.45 / 1.23)),
                                 "se": pytest.approx(step_se), "word": "up"}
    assert type(t).from_json(saved) == t


def test_a_resolved_step_against_the_slope_makes_it_cannot_tell():
    rungs = [(4, interpolated(1.10, 0.01), 6), (8, interpolated(1.40, 0.01), 6), (12, interpolated(1.30, 0.01), 6),
             (16, interpolated(1.60, 0.01), 6)]
    t = ladder.fit_trend(rungs)
    assert [s.word for s in t.steps] == ["up", "down", "up"] and t.verdict == "cannot tell" and t.monotone is None


def test_a_rung_read_on_the_frontiers_points_alone_is_shown_and_used(tmp_path):
    """A rung whose frontier has no fit (two FLOPs points) still has its interpolated headline: the ladder
    shows it and the trend uses it."""
    from mltrain.tools.compare import Report

    labels = {"single": "experiment=single", "multilevel": "experiment=multilevel"}
    results = []
    for x, m in ((4, 1.2), (8, 1.3), (12, 1.45)):
        head = interpolated(m).headline.to_json()
        arms = [{"label": labels["single"], "run_kind": "single", "eval_seeds": [1, 2, 3, 4, 5, 6]},
                {"label": labels["multilevel"], "run_kind": "multilevel", "eval_seeds": [1, 2, 3, 4, 5, 6],
                 "multiplier": {"available": False, "why": "no fit of the frontier", "headline": head}}]
        results.append(ladder.ScaleResult(f"L{x}", 10_000 * x, 100, 8.0, labels, axis_value=x,
                                          comparison=Report.from_json({"arms": arms, "warnings": []})))
    report = ladder.ladder_report("t", ["single", "multilevel"], "single", results, [], "depth")
    assert report.trends[0].n_scales == 3 and report.trends[0].slope is not None
    md = ladder.render_markdown(report)
    assert "| 1.200 [" in md and "(interpolated)" in md and "unavailable" not in md
