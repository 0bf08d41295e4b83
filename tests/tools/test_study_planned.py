"""A study's planned cost (tools/study/planned.py) against its own planner: the runs plan.py and
tuning.py add up when every adaptive rule fires ("at most"), and when none does ("planned now"), on the
shipped depth_ladder's rung; the rate from a study's finished runs; `--status` prints the range.

No training: the runs' summaries are written by hand from a loss that makes the rules fire, and stage 1's
choice is the lowest mean loss on the selection seeds (mltrain-compare's rule), as in test_study.py."""

from __future__ import annotations

import json
import math

import pytest
from helpers import run_main

from mltrain.tools.study import planned, schema, tuning
from mltrain.tools.study.cli import compose_study
from mltrain.tools.study.compose import typed_study
from mltrain.tools.study.plan import EVAL, TUNE, Choice, Layout, evaluation_sweeps, setting_text, tuning_sweeps
from mltrain.tools.study.progress import ended, run_status
from mltrain.tools.study.schema import BUDGET, frontier_arm, selection_seeds

RUNG, STEPS = "L8", 3360


def study(tmp_path, *overrides):
    cfg = compose_study(["study=depth_ladder", f"dir={tmp_path / 'study'}", *overrides])
    schema.check(cfg)
    return typed_study(cfg)


def tuned_value(cfg, arm: str, setting: dict) -> float:
    """The value the loss depends on: the arm's first tuned key with two or more values (the frontier's LR)."""
    keys = [k for k in schema.tuned_keys(cfg.arms[arm]) if len(cfg.arms[arm].grid[k]) > 1]
    return float(setting[keys[0]]) if keys else 1.0


def every_rule(cfg, arm: str, setting: dict) -> float:
    """Best at the grid's top value (1.0): its edge runs and loses; one value below lies within tie_nats
    (the frontier's neighbour 0.577, the other arms' 0.3): a two-way near tie. The first warm-up wins (the
    shortest: its edge, a shorter one, runs and loses)."""
    if arm not in cfg.arms:
        return 1.9  # the control's schedule at the frontier's budgets wins each: both are evaluated
    x, slope = tuned_value(cfg, arm, setting), 0.02 if arm == frontier_arm(cfg) else 0.015
    warmups = [str(round(f * STEPS)) for f in cfg.frontier.warmup_fractions]
    late = 0.1 * (setting["schedule.warmup_steps"] != warmups[0]) if "schedule.warmup_steps" in setting else 0.0
    return 2.0 + (slope * math.log(1 / x) if x <= 1 else 0.5 * math.log(x)) + late


def no_rule(cfg, arm: str, setting: dict) -> float:
    """Best inside the grid (0.3), everything else far: no edge, no tie."""
    if arm not in cfg.arms:
        return 3.0
    x = tuned_value(cfg, arm, setting)
    late = 0.0 if setting.get("schedule.warmup_steps") in (None, str(round(0.045 * STEPS))) else 0.2
    return 2.0 + 0.3 * abs(math.log(x / 0.3)) + late


def choose(cfg, layout, sweeps) -> dict[str, Choice]:
    """Stage 1's choice by hand: the lowest mean over the selection seeds each setting has; the frontier's
    per budget; with extra selection seeds, a non-frontier arm's near tie names its runner-up
    (stages._choose_arm's rule)."""
    choices, seeds, f = {}, selection_seeds(cfg), frontier_arm(cfg)
    for arm in cfg.arms:
        runs = [r for s in sweeps if s.dir == layout.sweep(RUNG, TUNE, arm) for r in s.runs()]
        table = tuning.losses(runs)
        best = lambda settings, table=table: min(settings, key=lambda one: tuning.mean_loss(table, one, seeds))  # noqa: E731
        if arm == f:
            budgets = dict.fromkeys(dict(s)[BUDGET] for s in table)
            by_budget = {b: {k: v for k, v in best([s for s in table if dict(s)[BUDGET] == b]) if k != BUDGET}
                         for b in budgets}
            control = [r for s in sweeps if s.dir.name.endswith("@frontier") for r in s.runs()]
            rivals = tuning.losses(control)
            wins = {}
            for b, setting in by_budget.items():
                own = tuning.mean_loss(table, tuple(sorted({**setting, BUDGET: b}.items())), seeds)
                there = [(m, s) for s in rivals if dict(s)[BUDGET] == b and (m := tuning.mean_loss(rivals, s, seeds))]
                if there and min(there)[0] < own:
                    wins[b] = {k: v for k, v in min(there)[1] if k != BUDGET}
            choices[arm] = Choice({}, by_budget, wins)
            continue
        chosen = best(list(table))
        close = tuning.tied(table, table, list(cfg.selection_seeds), cfg.tie_nats) if cfg.extra_selection_seeds else []
        second = tuning.runner_up(table, close, seeds, chosen)
        choices[arm] = Choice(dict(chosen), runner_up=dict(second) if second else {})
    return choices


def simulate(cfg, layout, loss, budgets: list[str]) -> tuple[list, dict[str, Choice]]:
    """Every run the planner launches at the rung: the grids at `budgets`, then what the rules add until
    they add nothing, then stage 2; each run's summary written from `loss` as it is planned."""
    sweeps = tuning_sweeps(cfg, layout, RUNG, STEPS, budgets)
    for _ in range(20):
        for run in (r for s in sweeps for r in s.runs()):
            if not ended(run_status(run.dir)):
                run.dir.mkdir(parents=True, exist_ok=True)
                summary = {"status": "finished", "final_val_loss": loss(cfg, run.sweep.dir.name, run.setting)}
                (run.dir / "summary.json").write_text(json.dumps(summary))
        choices = choose(cfg, layout, sweeps)
        more = tuning.more_sweeps(cfg, layout, RUNG, STEPS, sweeps, choices, budgets)
        if not more:
            break
        sweeps += more
    runs = {r.dir: r for s in [*sweeps, *evaluation_sweeps(cfg, layout, RUNG, choices, STEPS)] for r in s.runs()}
    return list(runs.values()), choices


def unit(scale: str, arm: str) -> float:
    return {"single": 1.0, "schedule_control": 1.3}.get(arm, 1.1)  # any per-arm cost: the FLOPs weigh budgets


def flops(runs) -> float:
    return sum(float(r.setting.get(BUDGET, 1.0)) * unit(RUNG, r.sweep.arm.split("@")[0]) for r in runs)


def test_at_most_is_what_the_planner_adds_up_when_every_rule_and_bracketing_fire(tmp_path):
    cfg = study(tmp_path, "frontier.max_budget=3", "extra_selection_seeds=[100,101]", "frontier.ties=true")
    layout = Layout(tmp_path / "study", {RUNG: STEPS})
    base, more = planned.frontier_budgets(cfg)
    budgets = [setting_text(BUDGET, b) for b in (*base, *more)]  # bracketing to its cap
    runs, choices = simulate(cfg, layout, every_rule, budgets)
    items = planned.scale_items(cfg, RUNG)
    assert more == [3.0]
    # every rule did fire: the edge beyond 1.0, the ties on the extra seeds, the runner-ups, the control
    assert any(r.setting.get("optim.lr") == "3.333" for r in runs)
    assert {r.seed for r in runs} >= set(cfg.extra_selection_seeds)
    assert all(c.runner_up for a, c in choices.items() if a != frontier_arm(cfg))
    assert any(r.sweep.dir.name.endswith("@frontier") for r in runs)
    # the control's schedule won every budget: it and the budget's own choice are both evaluated
    won = choices[frontier_arm(cfg)]
    assert won.control_by_budget.keys() == won.by_budget.keys()
    evaluated = {(r.sweep.dir.name, r.setting[BUDGET]) for r in runs if r.sweep.stage == EVAL and BUDGET in r.setting}
    assert {(n, b) for b in budgets for n in ("single", cfg.frontier.control_arm + "@frontier")} <= evaluated
    most = sum(i.runs for i in items)
    assert most == pytest.approx(len(runs), rel=0.25)
    assert sum(i.runs * i.budget * unit(RUNG, i.arm) for i in items) == pytest.approx(flops(runs), rel=0.25)
    assert planned.plan(cfg, unit).most.runs == most * len(cfg.ladder)
    # successive halving: budget 0.5 tried every warm-up and, its choice the shortest, one shorter (the edge,
    # 1% / 4.44 of the steps); the budgets above only the one it chose
    warmups = {b: {r.setting["schedule.warmup_steps"] for r in runs if r.sweep.dir.name == "single"
                   and r.sweep.stage == TUNE and r.setting[BUDGET] == b} for b in budgets}
    assert warmups["0.5"] == {*(str(round(f * STEPS)) for f in cfg.frontier.warmup_fractions), "8"}
    assert all(len(warmups[b]) == 1 for b in budgets[1:])


def test_the_shipped_protocol_with_its_own_cuts_counts_what_its_planner_adds(tmp_path):
    cfg = study(tmp_path)  # as shipped: no ties, no bracketing, the control at its own arm's choice
    layout = Layout(tmp_path / "study", {RUNG: STEPS})
    base, more = planned.frontier_budgets(cfg)
    runs, _ = simulate(cfg, layout, every_rule, [setting_text(BUDGET, b) for b in base])
    items = planned.scale_items(cfg, RUNG)
    assert not more and sum(i.runs for i in items) == pytest.approx(len(runs), rel=0.25)
    assert sum(i.runs * i.budget * unit(RUNG, i.arm) for i in items) == pytest.approx(flops(runs), rel=0.25)
    control = [r for r in runs if r.sweep.dir.name == "schedule_control@frontier"]
    assert {r.setting["multilevel.coarse_optim.lr"] for r in control} == {"1.0"}  # its arm's choice alone


def test_planned_now_is_what_the_planner_adds_up_when_no_adaptive_rule_fires(tmp_path):
    cfg = study(tmp_path)
    layout = Layout(tmp_path / "study", {RUNG: STEPS})
    base, _ = planned.frontier_budgets(cfg)
    runs, choices = simulate(cfg, layout, no_rule, [setting_text(BUDGET, b) for b in base])
    assert not any(c.runner_up for c in choices.values())
    now = [i for i in planned.scale_items(cfg, RUNG) if not i.adaptive]
    assert sum(i.runs for i in now) == pytest.approx(len(runs), rel=0.25)
    assert sum(i.runs * i.budget * unit(RUNG, i.arm) for i in now) == pytest.approx(flops(runs), rel=0.25)


def test_the_rate_is_the_finished_runs_own_else_the_measured_default(tmp_path):
    cfg = study(tmp_path)
    root = tmp_path / "study"
    rate = planned.study_rate(cfg, root)
    assert rate.s_per_flop == planned.MEASURED_CPU_S_PER_FLOP and rate.parallel == cfg.launcher.n_jobs
    for i, (seconds, flop) in enumerate([(10.0, 2e10), (30.0, 4e10)]):  # 40 s for 6e10 FLOPs
        run = root / RUNG / "tune" / "single" / f"run{i}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"status": "finished", "wall_time_s": seconds, "total_flops": flop,
                                                          "eval_flops": 0, "diag_flops": 0}))
    rate = planned.study_rate(cfg, root)
    assert rate.s_per_flop == pytest.approx(40 / 6e10) and "2 finished runs" in rate.source
    assert rate.hours(6e10 * 3600) == pytest.approx(40 / cfg.launcher.n_jobs)
    assert rate.hours(0, 3600) == pytest.approx(planned.MEASURED_START_S / cfg.launcher.n_jobs)  # start-up a run


def test_status_prints_the_planned_range_and_the_rate(tmp_path, capsys):
    code, out, _ = run_main("study=smoke", f"dir={tmp_path / 'new'}", "--status", capsys=capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("study smoke plans"))
    now, most = (int(x.split(" runs")[0].replace(",", "")) for x in line.split("plans ")[1].split("at most "))
    assert 0 < now <= most and "FLOP/s a run" in line


def test_halving_budgets_are_planned_later_but_checked_up_front_and_bad_halving_is_one_line(tmp_path):
    from mltrain.core.errors import ConfigError
    from mltrain.tools.study.plan import possible_evaluation_runs

    cfg = study(tmp_path)
    layout = Layout(tmp_path / "study", {RUNG: STEPS})
    first = tuning_sweeps(cfg, layout, RUNG, STEPS)[0]
    assert dict(first.swept)[BUDGET] == ("0.5",)  # budgets 1 and 2 wait for budget 0.5's warm-up choice
    assert {r.setting[BUDGET] for r in possible_evaluation_runs(cfg, layout, RUNG) if r.sweep.arm == "single"} == {
        "0.5", "1.0", "2.0"}  # ... but a stale run folder at any budget is found before the study starts
    for bad in ("frontier.halving_keep=0", "frontier.halving_from=-1"):
        with pytest.raises(ConfigError, match="halving"):
            study(tmp_path, bad)


def test_the_progress_counts_from_the_start_exactly_the_evaluation_runs_it_planned(tmp_path):
    """Stage 2's standard runs (what the progress line counts from the start) are evaluation_run_count's
    runs; the control's schedule evaluated where it won a budget is an addition the progress grows by, as
    the runner-ups are (study-depth-v3 counted it from the start and printed "[212/211] ... -1 runs left")."""
    from types import SimpleNamespace

    from mltrain.tools.study.plan import evaluation_run_count
    from mltrain.tools.study.stages import _standard

    cfg = study(tmp_path)
    layout = Layout(tmp_path / "study", {RUNG: STEPS})
    base, _ = planned.frontier_budgets(cfg)
    runs, choices = simulate(cfg, layout, every_rule, [setting_text(BUDGET, b) for b in base])
    assert choices[frontier_arm(cfg)].control_by_budget  # the control's schedule won budgets: the extra runs exist
    evaluation = [r for r in runs if r.sweep.stage == EVAL]
    standard = _standard(SimpleNamespace(cfg=cfg), RUNG, evaluation)
    assert len(standard) == evaluation_run_count(cfg, RUNG)
    assert not any(r.sweep.dir.name.endswith("@frontier") for r in standard)
