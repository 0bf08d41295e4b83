"""The two places beside the arms' headline that print a bound decide it on the data by the same rule
(compare/ondata.py): the gains table (each arm's M against a frontier rebuilt without one tuning
dimension, compare/dimensions.py) and the per-configuration verdict table (compare/analysis.py). Each
with a case where the old code printed a bound the data do not support, and one where they do."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import linear_run

from mltrain.tools.compare import compare_dirs

E, A, ALPHA = 2.0, 3e4, 0.35
BUDGETS = {0.125: 1e13, 0.25: 2e13, 0.5: 4e13, 1.0: 8e13}
C_MAX, C_RUN = 8e13, 6e13
CONTROL = "coarsening=evenodd,multilevel.control=schedule"
OLD_WORD = "better than the longest baseline (saving only bounded)"


def law(flops: float) -> float:
    return E + A * flops ** -ALPHA


def flops_for(loss: float) -> float:
    return ((loss - E) / A) ** (-1 / ALPHA)


def lawful_frontier(root: Path, seeds) -> None:
    for s in seeds:
        for b, f in BUDGETS.items():
            label = "experiment=single" + (f",train.budget={b}" if b != 1.0 else "")
            linear_run(root, f"s_{b}_{s}", "single", label, s, flops=f, val=law(f), budget=b)


def multilevel(root: Path, seed, loss: float) -> None:
    linear_run(root, f"ml_{seed}", "multilevel", "experiment=multilevel", seed, flops=C_RUN, val=loss)


def arm(report: dict, kind: str) -> dict:
    (a,) = [a for a in report["arms"] if a["run_kind"] == kind]
    return a


def md_row(out: Path, start: str, after: str) -> str:
    lines = (out / "comparison.md").read_text().splitlines()
    section = lines[next(i for i, line in enumerate(lines) if line.startswith(after)):]
    return next(line for line in section if line.startswith(start))


# ---------------------------------------------------------------------------------------------
# the gains table: each arm's M against the frontier without the schedule control


STRADDLE = {0: -0.001, 1: -0.004, 2: -0.002, 3: 0.001, 4: 0.0005}  # loss − the plain frontier's lowest


@pytest.mark.parametrize("where", ["straddling", "beyond"])
def test_the_gains_table_prints_a_bound_only_where_the_data_decide_one(tmp_path, where):
    lawful_frontier(tmp_path, range(5))
    for s in range(5):
        # the control at 1e14 FLOPs beats every plain budget: without it the frontier ends at C_MAX
        linear_run(tmp_path, f"ctrl_{s}", "schedule_control", CONTROL, s, flops=1e14, val=law(1.2e14))
        multilevel(tmp_path, s, law(C_MAX) + STRADDLE[s] if where == "straddling" else law(1.05e14) + 0.001 * s)
    report = compare_dirs([tmp_path], select_seeds=[0], out=tmp_path / "out", plot=False)
    name = arm(report, "multilevel")["arm"]
    (gain,) = [g for g in report["frontier"]["gains"] if g["dimension"] == "schedule control"]
    reading = gain["arms"][name]
    row = md_row(tmp_path / "out", "| schedule control |", "| without | keeps |")
    cell = next(c for c in row.split("|")[4].split(";") if c.strip().startswith(f"`{name}`"))
    if where == "straddling":
        # the old rule, on the fitted curve (the plain frontier lies on the law, so its fit is the law):
        # the evaluation seeds' mean equal-loss FLOPs lie past C_MAX, and it printed "M > C_MAX / C_RUN"
        log_c_eq = np.mean([math.log(flops_for(law(C_MAX) + STRADDLE[s])) for s in (1, 2, 3, 4)])
        assert log_c_eq > math.log(C_MAX)
        # on the data: two of four runs below the lowest point, the mean gap not below 0 with confidence
        assert reading["bound"] is None and reading["kind"] in ("joint", "per_run")
        assert reading["M"] == pytest.approx(C_MAX / C_RUN, rel=0.02)  # the trusted fit reads it, as the headline would
        assert "M >" not in cell and "(fit)" in cell
    else:
        assert reading == {"M": None, "bound": pytest.approx(C_MAX / C_RUN), "kind": "bound"}
        assert "M > 1.33" in cell
    # against the full frontier (the control's runs in it) the arm lies inside the data either way
    assert arm(report, "multilevel")["multiplier"]["headline"]["kind"] == "interpolated"


def test_an_interpolated_gain_reading_has_its_interval_and_the_controls_is_its_own_headline(tmp_path):
    """Against the frontier without the schedule control, each arm's reading inside the data has the
    headline's interval, log-M standard error and degrees of freedom; the control's own headline is read on
    that same frontier, so its reading there is its headline (what sets an arm over the control)."""
    lawful_frontier(tmp_path, range(5))
    for s in range(5):
        linear_run(tmp_path, f"ctrl_{s}", "schedule_control", CONTROL, s, flops=6e13, val=law(5e13) + 0.002 * (s - 2))
        multilevel(tmp_path, s, law(4.5e13) + 0.003 * (s - 2))
    report = compare_dirs([tmp_path], select_seeds=[0], out=tmp_path / "out", plot=False)
    (gain,) = [g for g in report["frontier"]["gains"] if g["dimension"] == "schedule control"]
    ctrl, ml = arm(report, "schedule_control"), arm(report, "multilevel")
    head = ctrl["multiplier"]["headline"]
    assert head["kind"] == "interpolated"
    assert gain["arms"][ctrl["arm"]] == {"M": head["M"], "bound": None, "kind": "interpolated", "M_lo": head["M_lo"],
                                         "M_hi": head["M_hi"], "log_se": head["log_se"], "dof": head["dof"]}
    reading = gain["arms"][ml["arm"]]
    assert reading["kind"] == "interpolated" and reading["M_lo"] < reading["M"] < reading["M_hi"]
    assert reading["M"] == pytest.approx(4.5e13 / C_RUN, rel=0.05) and reading["log_se"] > 0 and reading["dof"] == 3
    row = md_row(tmp_path / "out", "| schedule control |", "| without | keeps |")
    assert f"[{reading['M_lo']:.3g}, {reading['M_hi']:.3g}]" in row


# ---------------------------------------------------------------------------------------------
# the per-configuration verdict table


@pytest.mark.parametrize("case", ["below, not with confidence", "one run below", "beyond"])
def test_the_configuration_verdict_claims_a_bound_only_beyond_the_data_with_confidence(tmp_path, case):
    lawful_frontier(tmp_path, range(4))
    if case == "below, not with confidence":  # every run below the lowest point, one far: the mean gap's limit > 0
        for s, d in enumerate((-0.0005, -0.02, -0.001, -0.0008)):
            multilevel(tmp_path, s, law(C_MAX) + d)
    elif case == "one run below":  # one run, however far below, is never beyond with confidence
        multilevel(tmp_path, 0, law(2e14))
    else:
        for s in range(4):
            multilevel(tmp_path, s, law(1.6e14 * (1 + 0.05 * s)))
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    (vs,) = [e for e in report["vs_frontier"] if e["run_kind"] == "multilevel"]
    (v,) = [e for e in report["verdict"] if e["run_kind"] == "multilevel"]
    m = arm(report, "multilevel")["multiplier"]
    row = md_row(tmp_path / "out", "| `multilevel", "## Every configuration")
    assert vs["n_outside"]["below"] == v["n_seeds"] and v["saving"]["n"] == 0  # every run outside: no interval
    # the old word, from any run below the longest budget
    assert v["verdict"] != OLD_WORD
    if case == "beyond":
        assert vs["gap_upper"] < 0 and vs["bound"] == pytest.approx(C_MAX / C_RUN)
        assert v["verdict"] == "saves FLOPs (saving only bounded)"
        assert v["saving_lower_limit"] == pytest.approx(1 - C_RUN / C_MAX)
        assert "saving > 25.0%" in row
        assert m["bound"]["value"] == pytest.approx(vs["bound"])  # the arm's headline: the same bound
    else:
        assert vs["bound"] is None and v["saving_lower_limit"] is None
        assert v["verdict"].endswith("not beyond the frontier's data with 97.5% confidence: no verdict")
        assert "saving >" not in row
        if case == "below, not with confidence":
            assert vs["gap_upper"] > 0
            assert m["headline"]["kind"] != "bound"  # nor does the arm's headline claim one
        else:
            assert vs["gap_upper"] is None
    # per run, what the data show is kept: each run's own saving bound on its seed's envelope
    assert all(s["outside"] == "below" and s["saving_bound"][0] == ">" for s in vs["per_seed"])
