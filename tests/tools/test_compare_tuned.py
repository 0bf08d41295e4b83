"""The tuned verdict on constructed runs whose answers are worked out by hand: the tuned frontier across
LRs and budgets, selection on seeds apart, the power-law compute multiplier (recovered from points made
with a known E, A, α; an extrapolated point; a fit that cannot be made), the warnings about tuning, the
wall-clock saving, readable names, and `compare_dirs` on one arm alone."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import linear_run

from mltrain.tools.compare import compare_dirs, main
from mltrain.tools.compare.powerlaw import fit_power_law


E, A, ALPHA = 2.0, 3e4, 0.35  # the frontier every test here is made from: L(C) = E + A·C^-α
BUDGET_FLOPS = {0.25: 1e13, 0.5: 2e13, 0.75: 4e13, 1.0: 8e13}
ML = "coarsening=evenodd,multilevel.coarse_optim.lr={clr},optim.lr=0.1"


def law(flops: float) -> float:
    return E + A * flops ** -ALPHA


def flops_for(loss: float) -> float:
    return (A / (loss - E)) ** (1 / ALPHA)


def single(root: Path, seed, lr: float, budget: float, loss: float, **summary) -> None:
    label = f"optim.lr={lr}" + (f",train.budget={budget}" if budget != 1.0 else "")
    linear_run(root, f"s_lr{lr}_b{budget}_s{seed}", "single", label, seed, flops=BUDGET_FLOPS[budget], val=loss,
             budget=budget, summary=summary)


def frontier_runs(root: Path, seeds, penalty=lambda seed, lr, budget: 0.0, lrs=(0.1,), **summary) -> None:
    """Single-level runs at every budget and LR, on the law plus a penalty for the LR."""
    for s in seeds:
        for lr in lrs:
            for b, f in BUDGET_FLOPS.items():
                single(root, s, lr, b, law(f) + penalty(s, lr, b), **summary)


def multilevel(root: Path, seed, clr: float, flops: float, k: float, **summary) -> None:
    """A run k times as efficient as the frontier: at `flops` it reaches the law's loss at k·flops."""
    linear_run(root, f"ml_c{clr}_s{seed}_{k}", "multilevel", ML.format(clr=clr), seed, flops=flops, val=law(k * flops),
             summary=summary)


def arm(report: dict, kind: str) -> dict:
    (a,) = [a for a in report["arms"] if a["run_kind"] == kind]
    return a


# ---------------------------------------------------------------------------------------------
# the tuned frontier


def test_the_frontier_is_one_envelope_over_every_lr_and_budget(tmp_path):
    # The best LR changes with the budget: 1.0 at the two shortest, 0.1 at 0.75, 0.01 at full length.
    best = {0.25: 1.0, 0.5: 1.0, 0.75: 0.1, 1.0: 0.01}
    frontier_runs(tmp_path, (0, 1), lambda s, lr, b: 0.0 if lr == best[b] else 0.05, lrs=(0.01, 0.1, 1.0))
    report = compare_dirs([tmp_path], plot=False)
    points = report["frontier"]["points"]
    assert [(p["seed"], p["flops"]) for p in points] == [(s, f) for s in (0, 1) for f in BUDGET_FLOPS.values()]
    for p in points:
        budget = next(b for b, f in BUDGET_FLOPS.items() if f == p["flops"])
        assert p["settings"] == {"optim.lr": best[budget], "train.budget": budget}
        assert p["loss"] == pytest.approx(law(p["flops"]))
    s = arm(report, "single")
    assert s["settings_tried"] == 3 and len(report["arms"]) == 1  # one frontier, not three baselines
    assert s["selected_by_budget"] == {str(b): {"optim.lr": lr} for b, lr in best.items()}
    assert s["selected"] == {"optim.lr": 0.01}
    assert report["baseline"]["label"] == "optim.lr=0.01"
    assert not any("NOT TUNED" in w for w in report["warnings"])


# ---------------------------------------------------------------------------------------------
# selection on seeds apart


def test_selection_seeds_choose_and_the_other_seeds_measure(tmp_path):
    # Seed 0 prefers LR 0.1 (a lucky seed); seeds 1-3 would prefer 0.01. The verdict keeps 0.1 and
    # measures it on seeds 1-3 only: its own, worse, numbers there.
    frontier_runs(tmp_path, range(4), lambda s, lr, b: (0.0 if lr == 0.1 else 0.02) if s == 0
                  else (0.03 if lr == 0.1 else 0.0) + 0.01 * s, lrs=(0.01, 0.1))
    for s in range(4):  # coarse LR 1.0 wins on seed 0 only
        multilevel(tmp_path, s, 0.1, 3e13, 2.0 if s else 1.5)
        multilevel(tmp_path, s, 1.0, 3e13, 1.6 if s == 0 else 1.2)
    report = compare_dirs([tmp_path], select_seeds=[0], plot=False)
    assert report["optimistic"] is False
    s, m = arm(report, "single"), arm(report, "multilevel")
    assert s["selected"] == {"optim.lr": 0.1} and m["selected"] == {"optim.lr": 0.1, "multilevel.coarse_optim.lr": 1.0}
    for a in (s, m):
        assert a["selection_seeds"] == [0] and a["eval_seeds"] == [1, 2, 3]
    assert s["final_val_loss"]["mean"] == pytest.approx(law(8e13) + 0.03 + 0.02)  # seeds 1-3: offsets .01, .02, .03
    assert s["final_val_loss"]["n"] == 3
    assert m["final_val_loss"]["mean"] == pytest.approx(law(1.2 * 3e13))
    assert {p["seed"] for p in report["frontier"]["points"]} == {1, 2, 3}
    assert {p["settings"]["optim.lr"] for p in report["frontier"]["points"]} == {0.1}  # kept per budget on seed 0


def test_without_selection_seeds_the_verdict_is_called_optimistic(tmp_path):
    frontier_runs(tmp_path, range(2), lambda s, lr, b: 0.0 if lr == 0.1 else 0.02, lrs=(0.01, 0.1))
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    assert report["optimistic"] is True
    s = arm(report, "single")
    assert s["selection_seeds"] == s["eval_seeds"] == [0, 1]
    assert any("optimistic" in w for w in report["warnings"])
    assert "**Optimistic**" in (tmp_path / "out" / "comparison.md").read_text()


def test_a_selection_seed_no_run_has_is_one_line_and_the_report_is_written(tmp_path, capsys):
    frontier_runs(tmp_path / "runs", range(2), lrs=(0.01, 0.1))
    rc = main([str(tmp_path / "runs"), "--select-seeds", "7", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0 and "mltrain-compare: warning: --select-seeds 7: no usable run has seed 7" in err.splitlines()
    report = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert report["optimistic"] is True and report["arms"][0]["eval_seeds"] == [0, 1]


# ---------------------------------------------------------------------------------------------
# the compute multiplier


def test_the_fit_recovers_a_known_power_law():
    flops = np.geomspace(1e13, 1e15, 7)
    fit = fit_power_law(flops, [law(f) for f in flops])
    assert fit.available and fit.as_result().loss == "soft_l1 on log residuals"
    assert (fit.law.E, fit.law.A, fit.law.alpha) == pytest.approx((E, A, ALPHA), rel=1e-4)
    assert fit.law.flops_for(law(3e14)) == pytest.approx(3e14, rel=1e-4)
    assert fit.law.flops_for(E - 0.1) is None  # below the floor: no compute reaches it


def test_multiplier_beyond_the_data_is_a_bound_and_the_control_joins_the_frontier(tmp_path):
    frontier_runs(tmp_path, range(3))
    ks = {0: 1.8, 1: 2.0, 2: 2.2}
    for s, k in ks.items():
        multilevel(tmp_path, s, 0.1, 3e13, k)
        multilevel(tmp_path, s, 1.0, 6e13, 4.0)  # C_eq = 2.4e14, 3x past the dearest frontier point
        # single-level training with another schedule: at 6e13 FLOPs the loss the law gives at 5e13
        linear_run(tmp_path, f"ctrl_s{s}", "schedule_control", "coarsening=evenodd,multilevel.control=schedule", s,
                   flops=6e13, val=law(5e13))
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    fit = report["frontier"]["fit"]
    assert fit["available"] and fit["n_points"] == 15 and fit["flop_range"] == [1e13, 8e13]
    assert fit["E"] == pytest.approx(E, rel=0.05)  # the control's point, a little off the law, moves A and α
    assert {p["run_kind"] for p in report["frontier"]["points"]} == {"single", "schedule_control"}
    arms = {a["selected"].get("multilevel.coarse_optim.lr"): a for a in report["arms"] if a["run_kind"] == "multilevel"}
    assert len(arms) == 1  # both coarse LRs are one arm: it keeps the lower final loss, coarse LR 1.0
    m = arms[1.0]["multiplier"]
    # the fitted reading is kept (extrapolated, and off: 4.8 for a true 4) but the arm's M is only a bound
    assert m["bound"]["kind"] == "lower" and m["bound"]["value"] == pytest.approx(8 / 6)  # C_max / C_run
    assert m["available"] and m["M"] > m["bound"]["value"] and m["extrapolated"] and m["beyond_data"] > 2
    assert m["headline"]["kind"] == "bound" and m["M_hi"] is None
    ctrl = arm(report, "schedule_control")
    assert ctrl["measured_against"] == "the frontier without the schedule control's runs"
    assert ctrl["multiplier"]["M"] == pytest.approx(5 / 6, rel=1e-3)  # on the plain frontier: law(5e13) at 6e13
    assert report["frontier"]["without_control"]["fit"]["n_points"] == 12
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "saving 1 − 1/M" in md and "M > 1.33" in md and "> 25.0%" in md


def test_the_bootstrap_interval_is_t_calibrated_and_reproducible(tmp_path):
    frontier_runs(tmp_path, range(4))
    ks = {0: 1.8, 1: 1.9, 2: 2.1, 3: 2.2}
    for s, k in ks.items():
        multilevel(tmp_path, s, 0.1, 3e13, k)
    report = compare_dirs([tmp_path], plot=False)
    m = arm(report, "multilevel")["multiplier"]
    logs = np.log(list(ks.values()))
    assert m["M"] == pytest.approx(math.exp(logs.mean()), rel=1e-3) and not m["extrapolated"] and m["beyond_data"] is None
    # On a noise-free frontier each draw's M is the mean of the drawn seeds' log M: the calibrated bootstrap
    # interval is then the t interval of the four log M (t at 3 df), wider than the seeds' own spread
    half = 3.182446305284263 * logs.std(ddof=1) / 2  # t(0.975, 3) · sem
    assert (math.log(m["M_lo"]), math.log(m["M_hi"])) == pytest.approx((logs.mean() - half, logs.mean() + half), rel=0.05)
    assert m["M_lo"] < 1.8 and m["M_hi"] > 2.2  # the percentile bootstrap stayed inside [1.8, 2.2]: it covered ~80%
    assert m["saving_lo"] == pytest.approx(1 - 1 / m["M_lo"])
    assert compare_dirs([tmp_path], plot=False)["arms"] == report["arms"]  # a fixed bootstrap seed
    interpolated = arm(report, "multilevel")["saving_interpolated"]
    assert interpolated["available"] and interpolated["n"] == 4  # beside it, read on the points
    assert m["headline"]["kind"] == "interpolated" and m["headline"]["dof"] == 3  # inside the data: the points lead


def test_fewer_than_four_seeds_give_no_bootstrap_interval_but_the_t_interval_on_the_points(tmp_path):
    # With 3 seeds, one in nine draws repeats one seed three times: the 2.5% tails would be single seeds.
    frontier_runs(tmp_path, range(3))
    for s, k in {0: 1.8, 1: 2.0, 2: 2.2}.items():
        multilevel(tmp_path, s, 0.1, 3e13, k)
    a = arm(compare_dirs([tmp_path], plot=False), "multilevel")
    m = a["multiplier"]
    assert m["available"] and m["M_lo"] is None and m["M_hi"] is None
    assert any("fewer than 4 evaluation seeds" in w for w in m["warnings"])
    # inside the data the Student t interval over the 3 runs' interpolated log M leads (2 df: wide, valid)
    head = m["headline"]
    assert head["kind"] == "interpolated" and head["dof"] == 2 and head["M_lo"] < head["M"] < head["M_hi"]
    assert a["verdict"] == ("saves FLOPs" if head["M_lo"] > 1 else "no evidence either way")


def test_one_seed_gives_too_few_seeds(tmp_path):
    frontier_runs(tmp_path, range(2))
    multilevel(tmp_path, 0, 0.1, 3e13, 1.8)
    a = arm(compare_dirs([tmp_path], plot=False), "multilevel")
    assert a["multiplier"]["headline"]["kind"] == "interpolated" and a["multiplier"]["headline"]["M_lo"] is None
    assert a["verdict"] == "too few seeds (n=1)"


def test_fewer_than_three_frontier_points_leave_the_multiplier_unavailable(tmp_path, capsys):
    for s in (0, 1):
        for b in (0.5, 1.0):
            single(tmp_path / "runs", s, 0.1, b, law(BUDGET_FLOPS[b]))
        multilevel(tmp_path / "runs", s, 0.1, 3e13, 2.0)
    rc = main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0
    (line,) = [w for w in err.splitlines() if "multiplier unavailable" in w]
    assert "2 frontier point(s) at distinct FLOPs: a power law needs 3" in line
    report = json.loads((tmp_path / "out" / "comparison.json").read_text())
    m = arm(report, "multilevel")
    assert not m["multiplier"]["available"] and "a power law needs 3" in m["multiplier"]["why"]
    assert m["saving_interpolated"]["available"]  # the rest of the report is still there
    assert (tmp_path / "out" / "comparison.png").stat().st_size > 1000


def test_a_fit_that_does_not_converge_is_said_and_the_report_still_written(tmp_path, capsys):
    # A cliff then a floor: no power law fits it; α runs into its bound.
    for s in (0, 1):
        for b, loss in zip(BUDGET_FLOPS, (4.0, 1.0, 0.99, 0.98)):
            single(tmp_path / "runs", s, 0.1, b, loss)
        linear_run(tmp_path / "runs", f"ml{s}", "multilevel", "coarsening=evenodd", s, flops=3e13, val=0.995)
    rc = main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0 and any("multiplier unavailable: the fit did not converge" in w for w in err.splitlines())
    report = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert not report["frontier"]["fit"]["available"] and "did not converge" in report["frontier"]["fit"]["why"]
    assert "did not converge" in arm(report, "multilevel")["multiplier"]["why"]
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "Fitted compute multiplier unavailable: the fit did not converge" in md
    # the runs lie inside the frontier's points (between 2e13 and 4e13): M is still read on them
    head = arm(report, "multilevel")["multiplier"]["headline"]
    assert head["kind"] == "interpolated" and "read on the frontier's points" in md
    assert 2e13 / 3e13 < head["M"] < 4e13 / 3e13  # between the points the loss 0.995 lies between


# ---------------------------------------------------------------------------------------------
# tuning warnings


def test_one_lr_baseline_is_flagged_loudly_and_unequal_tuning_is_warned(tmp_path, capsys):
    frontier_runs(tmp_path / "runs", range(2))  # single-level: one LR
    for s in range(2):
        for clr in (0.01, 0.1, 1.0):
            multilevel(tmp_path / "runs", s, clr, 3e13, 2.0 - clr / 2)
    rc = main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--tune", "optim.momentum"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 0
    report = json.loads((tmp_path / "out" / "comparison.json").read_text())
    loud = report["warnings"][0]
    assert "THE BASELINE WAS NOT TUNED" in loud and "assumes its LR is optimal" in loud
    assert any("tuned unequally" in w and "single 1" in w and "multilevel" in w and " 3" in w for w in report["warnings"])
    assert any(w.startswith("--tune optim.momentum: no run varies it") for w in report["warnings"])
    assert arm(report, "single")["settings_tried"] == 1 and arm(report, "multilevel")["settings_tried"] == 3
    assert f"mltrain-compare: warning: {loud}" in err
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert f"> **{loud}**" in md.split("## Verdict")[0]  # at the top, before anything else


def test_tune_adds_a_free_key_to_every_arm(tmp_path):
    for s in range(2):
        for mom in (0.8, 0.9):
            linear_run(tmp_path, f"s{mom}_{s}", "single", f"optim.lr=0.1,optim.momentum={mom}", s, flops=8e13,
                     val=2.5 + (mom == 0.9) * 0.1)
    report = compare_dirs([tmp_path], plot=False)
    assert len(report["arms"]) == 2 and {a["label"] for a in report["arms"]} == {"optim.momentum=0.8", "optim.momentum=0.9"}
    report = compare_dirs([tmp_path], tune=["optim.momentum"], plot=False)
    (s,) = report["arms"]
    assert s["label"] == "" and s["settings_tried"] == 2 and s["selected"] == {"optim.lr": 0.1, "optim.momentum": 0.8}


# ---------------------------------------------------------------------------------------------
# wall-clock, names, the API on one arm


def test_wallclock_saving_says_whether_evaluation_is_in_the_time(tmp_path):
    frontier_runs(tmp_path, range(2))
    for d in tmp_path.iterdir():  # train time = 1 s per 1e12 FLOPs; wall time adds 5 s of evaluation
        s = json.loads((d / "summary.json").read_text())
        s["train_time_s"], s["wall_time_s"] = s["total_flops"] / 1e12, s["total_flops"] / 1e12 + 5
        (d / "summary.json").write_text(json.dumps(s))
    for s in range(2):  # reaches the loss of 6e13 FLOPs, i.e. of 60 s, in 40 s
        multilevel(tmp_path, s, 0.1, 3e13, 2.0, train_time_s=40.0, wall_time_s=45.0)
    w = arm(compare_dirs([tmp_path], plot=False), "multilevel")["saving_wallclock"]
    assert w["available"] and w["time_basis"] == "train time (evaluation excluded)"
    # 60 s lies between the frontier's 40 s and 80 s points: read linearly in log time, as the FLOPs are
    expected = 1 - 40 / math.exp(math.log(40) + (law(4e13) - law(6e13)) / (law(4e13) - law(8e13)) * math.log(2))
    assert w["saving"] == pytest.approx(expected)
    for d in tmp_path.iterdir():  # older runs: wall time only
        s = json.loads((d / "summary.json").read_text())
        del s["train_time_s"]
        (d / "summary.json").write_text(json.dumps(s))
    w = arm(compare_dirs([tmp_path], plot=False), "multilevel")["saving_wallclock"]
    assert w["time_basis"].startswith("wall time (includes evaluation")


def test_no_wallclock_saving_from_runs_of_two_machines(tmp_path):
    frontier_runs(tmp_path, range(2))
    for s in range(2):
        multilevel(tmp_path, s, 0.1, 3e13, 2.0, train_time_s=40.0, wall_time_s=45.0)
    for i, d in enumerate(sorted(tmp_path.iterdir())):  # half of the runs timed on another machine
        s = json.loads((d / "summary.json").read_text())
        s.setdefault("train_time_s", s["total_flops"] / 1e12)
        s["environment"] = {"machine_id": f"m{i % 2}"}
        (d / "summary.json").write_text(json.dumps(s))
    report = compare_dirs([tmp_path], plot=False)
    w = arm(report, "multilevel")["saving_wallclock"]
    assert not w or not w.get("available"), w
    assert "2 machines: wall-clock times are not compared across machines" in json.dumps(report["frontier"]["wallclock"])
    assert arm(report, "multilevel")["multiplier"]  # the FLOPs comparison stands


def test_configurations_are_named_by_the_keys_that_differ(tmp_path):
    frontier_runs(tmp_path / "runs", range(1), lrs=(0.01, 0.1))
    for clr in (0.1, 1.0):
        multilevel(tmp_path / "runs", 0, clr, 3e13, 2.0)
    report = compare_dirs([tmp_path / "runs"], out=tmp_path / "out")
    names = {c["label"]: c["name"] for c in report["configurations"]}
    assert names[ML.format(clr=0.1)] == "multilevel · lr 0.1 · coarse lr 0.1 · coarsening=evenodd"
    assert names["optim.lr=0.01,train.budget=0.5"] == "single · lr 0.01 · steps × 0.5"
    assert names["optim.lr=0.1"] == "single · lr 0.1"
    assert len(set(names.values())) == len(names)
    assert {a["arm"] for a in report["arms"]} == {"single", "multilevel · coarsening=evenodd"}
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "`multilevel · lr 0.1 · coarse lr 1.0 · coarsening=evenodd`" in md


def test_the_legend_never_covers_a_curve(tmp_path, monkeypatch):
    import matplotlib.figure

    frontier_runs(tmp_path / "runs", range(2), lrs=(0.01, 0.1))
    for clr in (0.01, 0.1, 1.0):
        multilevel(tmp_path / "runs", 0, clr, 3e13, 2.0)
    seen, save = [], matplotlib.figure.Figure.savefig

    def measure(fig, *args, **kwargs):  # where everything was drawn, before the figure is closed
        save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        (legend,) = fig.legends
        seen.append((legend.get_window_extent(renderer), [ax.get_window_extent(renderer) for ax in fig.axes],
                     [ax.get_legend() for ax in fig.axes], len(legend.get_texts())))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", measure)
    compare_dirs([tmp_path / "runs"], out=tmp_path / "out")
    ((box, axes, axes_legends, entries),) = seen
    assert len(axes) == 3 and axes_legends == [None, None, None] and entries >= 4
    assert not any(box.overlaps(ax) for ax in axes)


def test_compare_dirs_on_one_arm_alone_picks_its_best_setting(tmp_path):
    for clr, k in ((0.01, 1.2), (0.1, 2.0), (1.0, 1.5)):
        multilevel(tmp_path, 0, clr, 3e13, k)
    report = compare_dirs([tmp_path], select_seeds=[0], plot=False)
    (m,) = report["arms"]
    assert m["selected"] == {"optim.lr": 0.1, "multilevel.coarse_optim.lr": 0.1}
    assert m["label"] == "coarsening=evenodd" and m["settings_tried"] == 3 and m["eval_seeds"] == []
    assert not report["frontier"]["available"] and report["frontier"]["why"] == "no usable single-level runs"
    assert not report["frontier"]["fit"]["available"]
    assert not m["multiplier"]["available"] and m["multiplier"]["why"]
    assert report["baseline"] is None and report["outputs"] == {"png": None, "md": None, "json": None}
    assert not list(tmp_path.glob("comparison.*"))  # out=None writes nothing
    assert json.loads(json.dumps(report)) == report  # plain JSON


@pytest.mark.parametrize("best,edge", [(0.1, None), (1.0, "highest"), (0.01, "lowest")])
def test_a_kept_value_at_the_end_of_its_grid_is_called_possibly_under_tuned(tmp_path, best, edge):
    frontier_runs(tmp_path / "runs", range(2), lambda s, lr, b: abs(math.log10(lr / 0.1)) / 10, lrs=(0.03, 0.1, 0.3))
    for s in range(2):
        for clr in (0.01, 0.1, 1.0):
            multilevel(tmp_path / "runs", s, clr, 3e13, 2.0 - abs(math.log10(clr / best)) / 2)  # best: most efficient
    report = compare_dirs([tmp_path / "runs"], select_seeds=[0], plot=False)
    found = [w for w in report["warnings"] if "multilevel.coarse_optim.lr" in w and "under-tuned" in w]
    if edge is None:
        assert not found, found
    else:
        assert len(found) == 1 and f"kept multilevel.coarse_optim.lr={best}, the {edge}" in found[0]
    assert not [w for w in report["warnings"] if "single" in w and "optim.lr" in w and "under-tuned" in w]


def test_the_single_level_arm_is_the_frontier_and_the_fits_own_error_is_shown(tmp_path):
    # The frontier's budget-0.75 points sit above the law: no power law passes through every point, so
    # the fit read at the frontier's own points is off 1 — by as much as a small "saving" would be.
    frontier_runs(tmp_path, range(4), penalty=lambda seed, lr, budget: 0.01 if budget == 0.75 else 0.0)
    for s in range(4):
        multilevel(tmp_path, s, 0.1, 1.5e13, 1.0)  # exactly as efficient as the law the frontier came from
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    error = report["frontier"]["fit_error"]
    assert error["available"] and [e["budget"] for e in error["per_budget"]] == sorted(BUDGET_FLOPS)
    assert error["M_lo"] < 1 < error["M_hi"] and all(e["n"] == 4 for e in error["per_budget"])
    single = arm(report, "single")
    assert single["is_frontier"] and single["verdict"] == "the frontier" and single["within_fit_error"] is None
    ml = arm(report, "multilevel")
    assert error["M_lo"] <= ml["multiplier"]["M"] <= error["M_hi"]
    assert ml["within_fit_error"] is True and ml["verdict"] == "within the fit's own error"
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "| `single` |" in md and "the frontier" in md.split("| `single` |")[1].split("\n")[0]
    assert "The fit's own error" in md and "Within it here: `multilevel" in md


def test_a_selection_seed_no_run_has_is_not_said_to_have_built_the_frontier(tmp_path):
    frontier_runs(tmp_path, range(4))
    report = compare_dirs([tmp_path], select_seeds=[99], plot=False)
    built = report["frontier"]["built_from"]
    assert "seeds [99]" not in built and "no single-level run has a selection seed (99)" in built
    assert any("--select-seeds 99: no usable run has seed 99" in w for w in report["warnings"])


def test_the_controls_wallclock_saving_is_read_against_the_frontier_without_its_runs(tmp_path):
    """Train time proportional to FLOPs: the control's wall-clock saving equals its FLOPs saving on the
    plain frontier (it reaches law(5e13) at 6e13 FLOPs: about 1 − 6/5 = −20% read between the frontier's
    points), not 0 from reading its own runs."""
    frontier_runs(tmp_path, range(3), train_time_s=None)
    for d in tmp_path.iterdir():  # each single-level run's time: its FLOPs / 1e12 s
        s = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**s, "train_time_s": s["total_flops"] / 1e12}))
    for s in range(3):
        linear_run(tmp_path, f"ctrl_s{s}", "schedule_control", "coarsening=evenodd,multilevel.control=schedule", s,
                   flops=6e13, val=law(5e13), summary={"train_time_s": 60.0})
    report = compare_dirs([tmp_path], out=tmp_path / "out", plot=False)
    ctrl = arm(report, "schedule_control")
    wall, flops = ctrl["saving_wallclock"], ctrl["saving_interpolated"]
    assert wall["available"] and wall["saving"] == pytest.approx(flops["saving"], rel=1e-6)
    assert wall["saving"] == pytest.approx(-0.2, abs=0.03)
