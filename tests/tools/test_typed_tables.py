"""Every part of mltrain-compare's report and of the study's ladder is a typed result that reads back from
its JSON as itself: the frontier's points, fit, envelopes, tuning space and gains, the per-configuration
tables (tables.py), a rung's tuning record and a trend's left-out rungs. Found by walking real results (a
comparison of constructed runs, a constructed ladder), so a part built as a plain dict again is caught."""

from __future__ import annotations

import json
import typing
from dataclasses import fields, is_dataclass

from helpers import linear_run
from test_compare_tuned import frontier_runs, law, multilevel
from test_study import multiplier, scale_result

import mltrain.tools.compare as compare
from mltrain.core.jsonable import Jsonable
from mltrain.tools.compare import Multiplier, Report, compare_report, markdown_safe
from mltrain.tools.study import ladder
from mltrain.tools.study.rungs import ArmTuning, Ladder, RunnerUp, RungTuning, SettingLosses

# The typed parts every comparison below holds: the frontier's and the per-configuration tables'.
REPORT_PARTS = {"FrontierRun", "PowerLawFit", "ConfigurationMean", "EnvelopePoint", "SeedEnvelope", "WallclockFrontier",
                "TriedSetting", "BudgetTried", "Gain", "GainReading", "WithoutControl", "SeedInterval", "Outside",
                "Reference", "Baseline", "TargetReading", "SeedVsReference", "TargetSummary", "VsReference",
                "SeedVsFrontier", "VsFrontier", "FixedFlopsCell", "FixedFlopsRow", "FixedFlops", "HeldOut",
                "UncountedCost", "ConfigVerdict", "ConfigurationRun", "ConfigurationRow", "LeftOut", "BootstrapRecord",
                "Outputs"}
LADDER_PARTS = {"Ladder", "Rung", "RungArm", "Trend", "Prediction", "ExcludedRung", "RungTuning", "ArmTuning",
                "SettingLosses", "RunnerUp"}


def parts(value) -> list:
    """Every typed result inside `value` (itself included), depth first."""
    found = []
    if is_dataclass(value) and not isinstance(value, type):
        found.append(value)
        for f in fields(value):
            found += parts(getattr(value, f.name))
    elif isinstance(value, (list, tuple)):
        for v in value:
            found += parts(v)
    elif isinstance(value, dict):
        for v in value.values():
            found += parts(v)
    return found


# A rung keeps only ROW_KEYS of each arm's verdict (RungArm): read back, it holds those alone.
KEPT_IN_PART = {"Ladder", "Rung", "RungArm"}


def assert_reads_back(result) -> set[str]:
    """Each typed part of `result` written as JSON (through json.dumps) reads back as itself (a rung: as what
    it keeps) and writes the same JSON again; the names of the classes met."""
    met = set()
    for part in parts(result):
        if not hasattr(type(part), "from_json"):
            continue
        name = type(part).__name__
        written = json.loads(json.dumps(part.to_json()))
        again = type(part).from_json(written)
        assert again.to_json() == written, name
        assert name in KEPT_IN_PART or again == part, name
        met.add(name)
    return met


def test_every_part_of_a_comparison_reads_back_from_its_json(tmp_path):
    runs = tmp_path / "runs"
    frontier_runs(runs, range(5), lambda s, lr, b: (0.0 if lr == 0.1 else 0.02) + 0.003 * s, lrs=(0.1, 0.3),
                  train_time_s=10.0, diag_flops=1e11, eval_flops=2e11)
    for s in range(5):
        multilevel(runs, s, 0.1, 3e13, 1.8 + 0.1 * s, train_time_s=6.0)
        linear_run(runs, f"ctrl_s{s}", "schedule_control", "coarsening=evenodd,multilevel.control=schedule", s,
                   flops=6e13, val=law(5e13) + 0.001 * s, summary={"train_time_s": 7.0})
    linear_run(runs, "broken", "single", "optim.lr=0.3", 9, flops=8e13, val=3.0, nan_at=5)
    report = compare_report([runs], out=None, select_seeds=[0], tune=["optim.lr"], plot=False)
    assert report.vs_control and report.frontier.gains and report.excluded and report.frontier.without_control
    met = assert_reads_back(report)
    assert REPORT_PARTS <= met, REPORT_PARTS - met
    assert Report.from_json(json.loads(json.dumps(report.to_json()))) == report
    assert markdown_safe(report) == report  # nothing here to escape: the copy is the same typed report


def test_a_report_without_a_frontier_or_a_baseline_reads_back(tmp_path):
    runs = tmp_path / "runs"
    for s in range(2):
        multilevel(runs, s, 0.1, 3e13, 1.5)
    report = compare_report([runs], out=None, plot=False)
    assert report.baseline is None and not report.frontier.available and report.fixed_flops.rows == ()
    assert_reads_back(report)


def test_every_part_of_a_ladder_reads_back_from_its_json():
    results = [scale_result("s0", 100_000, multiplier(1.2)), scale_result("s1", 200_000, multiplier(1.1)),
               scale_result("s2", 400_000, multiplier(1.05)),
               scale_result("s3", 800_000, {**multiplier(1.3), "bound": {"kind": "lower", "value": 1.25}})]
    losses = (SettingLosses({"optim.lr": "0.1"}, {"0": 2.1, "100": 2.2}, 2.15), SettingLosses({"optim.lr": "0.3"}, {}))
    tuning = {"s0": RungTuning(("0.5", "1.0"), (0, 100), {
        "single": ArmTuning(0, 2, 4, losses, 2, losses[:1], {}, {"1.0": {"optim.lr": "0.1"}}, {}),
        "multilevel": ArmTuning(1, 2, 3, losses, setting={"optim.lr": "0.1"}, by_budget={}, control_by_budget={},
                                runner_up=RunnerUp({"optim.lr": "0.3"}, Multiplier.from_json(multiplier(1.1)))),
        "control": ArmTuning(0, 2, 2, losses)})}
    report = ladder.ladder_report("t", ["single", "multilevel"], "single", results, [22_368_512], tuning=tuning)
    (trend,) = report.trends
    assert trend.slope is not None and trend.predictions and trend.excluded  # s3: only a bound
    met = assert_reads_back(report)
    assert LADDER_PARTS <= met, LADDER_PARTS - met
    saved = json.loads(json.dumps(report.to_json()))
    again = Ladder.from_json(saved)
    assert again.to_json() == saved and again.trends == report.trends
    assert [r.tuning for r in again.rungs] == [r.tuning for r in report.rungs]


def test_an_arm_tuning_writes_only_the_keys_its_record_has():
    plain = ArmTuning(0, 2, 2).to_json()
    assert list(plain) == ["pilots", "settings_run", "settings_tried", "selection_losses"]
    chose = ArmTuning(0, 2, 2, setting={}, by_budget={}, control_by_budget={}).to_json()
    assert list(chose)[4:] == ["setting", "by_budget", "control_by_budget"]
    frontier = ArmTuning(0, 2, 3, control_settings_run=1, control_selection_losses=()).to_json()
    assert list(frontier)[4:] == ["control_settings_run", "control_selection_losses"]


def reachable(cls: type) -> set[str]:
    """The names of the typed results `cls`'s fields hold (through Optional, tuples and dicts), itself too."""
    found, todo = set(), [cls]
    while todo:
        c = todo.pop()
        if c.__name__ in found:
            continue
        found.add(c.__name__)
        for hint in typing.get_type_hints(c).values():
            todo += [t for t in _types_in(hint) if isinstance(t, type) and issubclass(t, Jsonable)]
    return found


def _types_in(hint) -> list:
    return [hint, *(t for a in typing.get_args(hint) for t in _types_in(a))]


def test_the_public_api_is_a_handful_of_names_and_every_part_is_reached_from_them():
    """compare exports a handful of names; every part of comparison.json is a field type of `Report`'s
    (so a consumer reaches it through the report), every part of ladder.json one of the study's `Ladder`."""
    assert len(compare.__all__) <= 13 and "Report" in compare.__all__
    assert REPORT_PARTS <= reachable(Report), REPORT_PARTS - reachable(Report)
    assert LADDER_PARTS - {"RungArm"} <= reachable(Ladder) and "Arm" in reachable(Ladder)
