"""scripts/reprint_verdict.py: a verdict committed with one machine's absolute paths is reprinted from its
records in another folder (a fresh clone's) and found identical; a changed figure is found and named."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from helpers import linear_run

from mltrain.tools.compare.cli import main as compare_main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reprint_verdict.py"
spec = importlib.util.spec_from_file_location("reprint_verdict", SCRIPT)
assert spec is not None and spec.loader is not None
reprint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reprint)


def committed_verdict(study: Path) -> Path:
    """A rung <study>/R4 with a three-budget frontier and a multilevel arm, compared as the study does."""
    rung = study / "R4"
    for seed in (0, 1):
        for b, f in {0.5: 1e13, 1.0: 2e13, 2.0: 4e13}.items():
            linear_run(rung / "eval" / "single", f"b{b},seed={seed}", "single", f"experiment=single,train.budget={b}",
                       seed, flops=f, val=3.0 - 0.3 * b + 0.01 * seed, budget=b)
        linear_run(rung / "eval" / "multilevel", f"seed={seed}", "multilevel", "experiment=multilevel", seed,
                   flops=2e13, val=2.55 + 0.01 * seed)
    runs = sorted(str(p) for p in rung.glob("eval/*/*"))
    assert compare_main([*runs, "--smooth", "1", "--out", str(rung / "verdict")]) == 0
    return rung / "verdict"


@pytest.fixture(scope="module")
def machine(tmp_path_factory) -> Path:
    """The study folder as the machine that ran it left it (one compare, shared by the tests: each copies it)."""
    study = tmp_path_factory.mktemp("machine") / "results" / "study"
    committed_verdict(study)
    return study


def test_a_verdict_moved_to_another_folder_reprints_identically(machine, tmp_path, capsys):
    clone = tmp_path / "a-fresh-clone-elsewhere" / "results" / "study"
    shutil.copytree(machine, clone)
    capsys.readouterr()
    assert str(machine) in (clone / "R4" / "verdict" / "comparison.json").read_text()
    assert not str(clone).startswith(str(machine))
    assert reprint.main([str(clone / "R4" / "verdict")]) == 0
    assert "identical" in capsys.readouterr().out


def test_a_changed_figure_is_found_and_named(machine, tmp_path, capsys):
    shutil.copytree(machine, tmp_path / "study")
    verdict = tmp_path / "study" / "R4" / "verdict"
    report = json.loads((verdict / "comparison.json").read_text())
    (arm,) = [a for a in report["arms"] if a["run_kind"] == "multilevel"]
    text = (verdict / "comparison.json").read_text()
    m = json.dumps(arm["multiplier"]["headline"]["M"])
    assert text.count(m) >= 1
    (verdict / "comparison.json").write_text(text.replace(m, json.dumps(arm["multiplier"]["headline"]["M"] * 1.01), 1))
    capsys.readouterr()
    assert reprint.main([str(verdict)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "comparison.json: line" in out


def test_a_folder_without_a_verdict_is_refused_before_any_compute(tmp_path, capsys):
    assert reprint.main([str(tmp_path)]) == 2
    assert "no comparison.json" in capsys.readouterr().err


def test_the_command_is_mapped_onto_the_clone_s_records(machine, tmp_path):
    args = reprint.command_of(machine / "R4" / "verdict")
    new, old_out = reprint.mapped(args, str(machine), str(tmp_path / "clone"), str(tmp_path / "out"))
    assert old_out == str(machine / "R4" / "verdict")
    runs = [a for a in new if "seed=" in a]
    assert len(runs) == 8 and all(a.startswith(str(tmp_path / "clone") + "/R4/eval/") for a in runs)
    assert not any(str(machine) in a for a in new)
    assert new[new.index("--out") + 1] == str(tmp_path / "out")
