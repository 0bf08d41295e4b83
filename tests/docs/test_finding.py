"""The README's finding is the reports' (scripts/finding.py): every finished study committed under results/
(its ladder.json) has its block with the same numbers, a ladder's in README.md, a one-rung study's in
docs/results-cpu.md; a changed number, a missing block and
an unfinished study are each caught and named."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mltrain.tools.compare import Arm, Multiplier
from mltrain.tools.compare.results import Headline
from mltrain.tools.study.rungs import Ladder, Rung, RungArm, Step, Trend

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "finding.py"
spec = importlib.util.spec_from_file_location("finding", SCRIPT)
assert spec is not None and spec.loader is not None
finding = importlib.util.module_from_spec(spec)
spec.loader.exec_module(finding)

FINISHED = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "results").glob("*/ladder.json"))


@pytest.mark.parametrize("study", FINISHED or [pytest.param(None, marks=pytest.mark.skip("no finished study yet"))])
def test_the_readme_shows_each_finished_study_with_its_reports_numbers(study, monkeypatch, capsys):
    """A ladder (two rungs or more) in the README's "What we found"; a one-rung study, a side-by-side of
    methods at one size, in docs/results-cpu.md (the README says it in a sentence and links there)."""
    monkeypatch.chdir(ROOT)
    rungs = json.loads((ROOT / study / "ladder.json").read_text())["scales"]
    page = "README.md" if len(rungs) > 1 else "docs/results-cpu.md"
    assert finding.main([study, "--check", page]) == 0, capsys.readouterr().out


def _arm(name: str, m: float, lo: float, hi: float, within: bool = False, log_se=None, dof=None,
         label: str = "") -> RungArm:
    head = Headline("interpolated", m, lo, hi, log_se=log_se, dof=dof)
    return RungArm(name, label or name, Arm(name=name, multiplier=Multiplier(True, M=m, M_lo=lo, M_hi=hi, headline=head),
                                   within_fit_error=within, eval_seeds=(1, 2, 3)))


def _study(folder: Path) -> Path:
    """A two-rung depth ladder written as the study writes it (ladder.json), in `folder`."""
    rungs = tuple(Rung(f"L{d}", float(d), n, steps, 8.0,
                       arms=(RungArm("single", "single"), _arm("multilevel", m, m - 0.1, m + 0.1, within=d == 4)),
                       verdict="comparison.json")
                  for d, n, steps, m in ((4, 58_368, 1_824, 1.125), (8, 107_520, 3_360, 1.25)))
    trend = Trend(arm="multilevel", n_scales=2, verdict="cannot tell", steps=(Step(4, 8, 0.1, 0.1, "unresolved"),),
                  sentence="multilevel: cannot tell whether the compute multiplier changes with depth: too few scales.")
    ladder = Ladder("toy_ladder", "depth", "depth: blocks (model.n_layer)", "single", 0.05, 3, 4, rungs, (trend,))
    folder.mkdir(parents=True)
    (folder / "ladder.json").write_text(json.dumps(ladder.to_json()))
    return folder


def test_the_block_has_a_row_per_rung_an_m_per_arm_and_the_trend_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = finding.render(_study(tmp_path / "results" / "toy"), "results/toy")
    lines = block.splitlines()
    assert lines[0] == "<!-- finding: results/toy -->" and lines[-1] == "<!-- /finding -->"
    assert lines[1] == "| blocks | parameters | multilevel |"
    assert lines[3] == "| 4 | 58,368 | 1.125 [1.025, 1.225] ‡ |"
    assert lines[4] == "| 8 | 107,520 | 1.250 [1.150, 1.350] |"
    assert lines[5:8] == ["| slope of log M | | cannot tell |", "| first → last, log M | | — |",
                          "| steps | | — |"]  # no fitted line (too few rungs): no steps either


def test_a_one_rung_study_has_its_row_and_no_trend_rows(tmp_path):
    study = _study(tmp_path / "toy")
    ladder = json.loads((study / "ladder.json").read_text())
    ladder["scales"] = ladder["scales"][1:]
    (study / "ladder.json").write_text(json.dumps(ladder))
    lines = finding.render(study, "toy").splitlines()
    assert lines[1:] == ["| blocks | parameters | multilevel |", "|---|---|---|", "| 8 | 107,520 | 1.250 [1.150, 1.350] |",
                         "<!-- /finding -->"]


def test_the_trend_rows_give_slope_contrast_and_the_steps_that_resolve(tmp_path):
    study = _study(tmp_path / "toy")
    ladder = json.loads((study / "ladder.json").read_text())
    ladder["trends"][0].update(slope=0.12, slope_lo=0.058, slope_hi=0.181, intercept=0.0, cov=[[1, 0], [0, 1]],
                               quantile=2.0, method="wls", n_min=4.0, n_max=8.0, contrast=0.152,
                               contrast_lo=0.058, contrast_hi=0.247, verdict="growing",
                               steps=[{"x_from": 4, "x_to": 8, "diff": 0.3, "se": 0.1, "word": "up"},
                                      {"x_from": 8, "x_to": 12, "diff": 0.1, "se": 0.1, "word": "unresolved"}])
    (study / "ladder.json").write_text(json.dumps(ladder))
    lines = finding.render(study, "toy").splitlines()
    assert lines[5:8] == ["| slope of log M | | growing: +0.120 [+0.058, +0.181] |",
                          "| first → last, log M | | +0.152 [+0.058, +0.247] |", "| steps | | 4→8 up (1 unresolved) |"]


def _control_frontier(study: Path, scale: str, readings: dict) -> None:
    """The rung's verdict as far as finding.py reads it: its arms' names and labels (the ladder's), and each
    arm's reading against the frontier without the control's runs (its tuning space's "schedule control" gain)."""
    gain = {"dimension": "schedule control", "restricted_to": "single-level runs without the schedule control's",
            "arms": {f"{arm} · its name": r for arm, r in readings.items()}}
    ladder = json.loads((study / "ladder.json").read_text())
    (rung,) = [r for r in ladder["scales"] if r["scale"] == scale]
    arms = [{"arm": f"{row['arm']} · its name", "label": row["label"]} for row in rung["arms"]]
    (study / scale / "verdict").mkdir(parents=True)
    (study / scale / "verdict" / "comparison.json").write_text(json.dumps({"arms": arms, "frontier": {"gains": [gain]}}))


def test_each_arm_the_control_mirrors_gets_its_m_over_the_controls_on_the_controls_frontier(tmp_path):
    study = _study(tmp_path / "toy")
    ladder = json.loads((study / "ladder.json").read_text())
    rung = Rung.from_json(ladder["scales"][1])
    coarse = "experiment={},model.n_layer=8,multilevel.coarse_steps=92,multilevel.n_cycles=6"
    arms = (rung.arms[0], _arm("multilevel", 1.25, 1.1, 1.4, log_se=0.05, dof=4, label=coarse.format("multilevel")),
            _arm("schedule_control", 1.0, 0.9, 1.1, log_se=0.05, dof=4, label=coarse.format("schedule_control")),
            _arm("raptr", 1.1, 1.0, 1.2, log_se=0.05, dof=4, label="experiment=raptr,model.n_layer=8"))
    ladder["scales"][1] = Rung.to_json(Rung(**{**rung.__dict__, "arms": arms}))
    first = ladder["scales"][0]["arms"]
    first[1] = _arm("multilevel", 1.125, 1.025, 1.225, label=coarse.format("multilevel")).to_json()
    first.append(_arm("schedule_control", 0.9, 0.8, 1.0, label=coarse.format("schedule_control")).to_json())
    first.append(_arm("raptr", 1.0, 0.9, 1.1, label="experiment=raptr,model.n_layer=4").to_json())
    (study / "ladder.json").write_text(json.dumps(ladder))
    control = {"M": 1.0, "bound": None, "kind": "interpolated", "M_lo": 0.9, "M_hi": 1.1, "log_se": 0.05, "dof": 4}
    # at 8 blocks, against the control's frontier (not the arm's own headline 1.25): multilevel reads 1.3
    _control_frontier(study, "L8", {"multilevel": {**control, "M": 1.3, "M_lo": 1.15, "M_hi": 1.45},
                                    "schedule_control": control, "raptr": {**control, "M": 1.2}})
    # at 4 blocks, multilevel lies beyond that frontier's data: a bound, over the control's upper limit
    _control_frontier(study, "L4", {"multilevel": {"M": None, "bound": 1.32, "kind": "bound"},
                                    "schedule_control": control})
    lines = finding.render(study, "toy").splitlines()
    # RaPTr has no coarse phases for the control to replace: no column of its own over the control
    assert lines[1].endswith("| multilevel | schedule_control | raptr | multilevel ÷ control |")
    # log(1.3) ± t(0.975, 8 Welch df) x sqrt(0.05² + 0.05²), by hand: [1.104, 1.530]
    assert lines[4].endswith("| 1.250 [1.100, 1.400] | 1.000 [0.900, 1.100] | 1.100 [1.000, 1.200] | 1.300 [1.104, 1.530] |")
    assert lines[3].endswith("| > 1.200 |")  # 1.32 / 1.1


def test_a_rung_without_its_verdict_or_a_reading_has_no_ratio(tmp_path):
    study = _study(tmp_path / "toy")
    ladder = json.loads((study / "ladder.json").read_text())
    coarse = "experiment={},model.n_layer=8,multilevel.coarse_steps=92"
    for rung in ladder["scales"]:
        rung["arms"][1] = _arm("multilevel", 1.25, 1.1, 1.4, label=coarse.format("multilevel")).to_json()
        rung["arms"].append(_arm("schedule_control", 1.0, 0.9, 1.1, label=coarse.format("schedule_control")).to_json())
    (study / "ladder.json").write_text(json.dumps(ladder))
    _control_frontier(study, "L8", {"multilevel": {"M": 1.3, "bound": None, "kind": "joint"},
                                    "schedule_control": {"M": 1.0, "bound": None, "kind": "interpolated"}})
    lines = finding.render(study, "toy").splitlines()
    assert lines[3].endswith("| — |") and lines[4].endswith("| — |")  # no comparison.json; a fitted reading: no interval


def test_write_then_check_passes_and_a_changed_number_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _study(tmp_path / "results" / "toy")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## What we found\n\n<!-- finding: results/toy -->\nold\n<!-- /finding -->\n\nafter\n")
    assert finding.main(["results/toy", "--write", "README.md"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n## What we found\n\n<!-- finding: results/toy -->\n| blocks |")
    assert text.endswith("<!-- /finding -->\n\nafter\n") and "old" not in text
    assert finding.main(["results/toy", "--check", "README.md"]) == 0
    readme.write_text(text.replace("1.250 [1.150", "1.260 [1.150"))
    capsys.readouterr()
    assert finding.main(["results/toy", "--check", "README.md"]) == 1
    out = capsys.readouterr().out
    assert "line 5 of the block" in out and "1.250 [1.150" in out and "1.260 [1.150" in out


def test_the_check_names_the_study_from_the_readmes_folder_whatever_the_working_folder(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    _study(repo / "results" / "toy")
    (repo / "README.md").write_text("# x\n\n<!-- finding: results/toy -->\nold\n<!-- /finding -->\n")
    monkeypatch.chdir(repo)
    assert finding.main(["results/toy/", "--write", "README.md"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (repo / "docs").mkdir()
    (repo / "docs" / "results.md").write_text((repo / "README.md").read_text())  # a page below: named from above
    for study, readme in ((repo / "results" / "toy", repo / "README.md"), ("../repo/results/toy", "../repo/README.md"),
                          ("../repo/results/toy", "../repo/docs/results.md")):
        capsys.readouterr()
        assert finding.main([str(study), "--check", str(readme)]) == 0, capsys.readouterr().out
        assert "results/toy: the same numbers as" in capsys.readouterr().out
    assert finding.block_name(Path("/elsewhere/results/toy"), repo / "README.md") == "/elsewhere/results/toy"
    with pytest.raises(SystemExit, match=r"^error: .*nope.md: cannot be read \("):
        finding.main([str(repo / "results" / "toy"), "--check", str(repo / "nope.md")])


def test_a_missing_block_and_an_unfinished_study_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _study(tmp_path / "results" / "toy")
    (tmp_path / "README.md").write_text("# x\n\nNothing yet.\n")
    assert finding.main(["results/toy", "--check", "README.md"]) == 1
    assert "no block" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="has no line"):
        finding.main(["results/toy", "--write", "README.md"])
    (tmp_path / "results" / "running").mkdir()
    with pytest.raises(SystemExit, match="ladder.json not found"):
        finding.main(["results/running"])


def test_a_damaged_report_is_one_error_line(tmp_path):
    study = _study(tmp_path / "toy")
    (study / "L8" / "verdict").mkdir(parents=True)
    (study / "L8" / "verdict" / "comparison.json").write_text('{"frontier": 3')
    rung = Rung.from_json(json.loads((study / "ladder.json").read_text())["scales"][1])
    with pytest.raises(SystemExit, match=r"comparison.json: not a readable report"):
        finding.control_frontier(study, rung)
    # valid JSON of another shape: where, and what was found there
    (study / "L8" / "verdict" / "comparison.json").write_text('{"frontier": {"gains": [{"arms": {"a": 3}}]}}')
    with pytest.raises(SystemExit, match=r"comparison.json: not a readable report \(not a Report: "
                                         r"frontier.gains\[0\].arms.a: expected an object, found a number\)$"):
        finding.control_frontier(study, rung)
    (study / "ladder.json").write_text("[]")
    with pytest.raises(SystemExit, match=r"ladder.json: not a readable report \(not a Ladder: expected an object, "
                                         r"found a list\)$"):
        finding.render(study, "toy")
