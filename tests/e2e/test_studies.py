"""mltrain-study end to end: the smoke study, a second invocation, runs missing or cut short, a new choice
counted, Ctrl-C, a study changed since its runs, a failing run, every setting of the big studies, and a
ladder along each axis."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import made_smoke_study, run_main
from omegaconf import OmegaConf

from mltrain.tools.compare import Report
from mltrain.tools.study import compose, ladder, launch, progress, stages
from mltrain.tools.study.axes import AXES
from mltrain.tools.study.cli import compose_study


def launches(monkeypatch) -> list:
    """Counts the sweeps the study launches (each is still launched)."""
    launched = []
    real = stages.multirun

    def counting(sweeps, env):
        launched.extend(sweeps)
        return real(sweeps, env)

    monkeypatch.setattr(stages, "multirun", counting)
    return launched


def summaries(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("summary.json")}


def reports(root: Path) -> dict:
    """What the ladder says per scale and arm, and every scale's selection (what a resume must reproduce)."""
    saved = json.loads((root / "ladder.json").read_text())
    keep = ("arm", "found", "selected", "selected_by_budget", "final_val_loss", "multiplier", "eval_seeds")
    return {"scales": [[{k: a.get(k) for k in keep} for a in s["arms"]] for s in saved["scales"]],
            "missing": [s["missing_runs"] for s in saved["scales"]],
            "selection": {p.parent.name: json.loads(p.read_text()) for p in root.glob("*/selection.json")}}


@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory):
    """The smoke study run once to the end (once for the whole suite, helpers.made_smoke_study): (this
    process's copy of its dir, exit status, its lines)."""
    return made_smoke_study(tmp_path_factory)


def test_smoke_study_end_to_end(smoke_study):
    root, code, out = smoke_study
    assert code == 0, out
    lines = out.splitlines()
    assert sum(line.startswith("[") for line in lines) == 32  # one line per run: 16 per scale
    assert "[32/32] " in out and "0 runs left" in lines[31]
    assert "multilevel: " in out and "with scale" in out and "0 run(s) did not finish" not in out
    saved = json.loads((root / "ladder.json").read_text())
    assert [s["scale"] for s in saved["scales"]] == ["d16", "d32"]
    for s in saved["scales"]:
        assert all(a["found"] for a in s["arms"]) and s["missing_runs"] == []
        assert (root / s["scale"] / "verdict" / "comparison.json").exists()
        chosen = json.loads((root / s["scale"] / "selection.json").read_text())["arms"]
        assert sorted(map(float, chosen["single"]["by_budget"])) == [0.5, 1.0, 2.0] and chosen["multilevel"]["setting"]
    for name in ("ladder.md", "ladder.png", "study.log"):
        assert (root / name).exists()
    runs = list(root.rglob("summary.json"))
    assert len(runs) == 32 and all(json.loads(p.read_text())["status"] == "finished" for p in runs)
    job = json.loads(next((root / "d32" / "eval" / "multilevel").glob("*/summary.json")).read_text())
    assert job["seed"] in (1, 2) and job["fine_steps"] == 52


def test_a_second_invocation_starts_no_run_and_rewrites_the_reports(smoke_study, verdict, monkeypatch):
    root = smoke_study[0]
    before = summaries(root)
    launched = launches(monkeypatch)
    code, out, _ = run_main("study=smoke", f"dir={root}")
    assert code == 0 and launched == [] and "0 sweep(s) launched" in out
    assert summaries(root) == before and not any(line.startswith("[") for line in out.splitlines())


def report_files(root: Path) -> dict[str, str]:
    """Every report the study writes from its runs (the ladder's, each scale's verdict and selection), as text."""
    found = [root / "ladder.json", root / "ladder.md", *root.glob("*/selection.json"),
             *root.glob("*/verdict/comparison.json"), *root.glob("*/verdict/comparison.md")]
    return {str(p.relative_to(root)): p.read_text() for p in found}


def test_reports_regenerated_from_the_same_runs_are_byte_identical(smoke_study, verdict, tmp_path, monkeypatch):
    """A second invocation on a copy of the smoke study launches no sweep and writes every report again,
    byte for byte what the study wrote as its runs ended (the study's folder, which the reports name, replaced
    by the copy's)."""
    root = tmp_path / "study"
    shutil.copytree(smoke_study[0], root, ignore=shutil.ignore_patterns(".mltrain.lock", "study.log"))
    made = json.loads((smoke_study[0].parent / "result.json").read_text())["root"]
    before = {name: text.replace(made, str(root)).replace(str(smoke_study[0]), str(root))
              for name, text in report_files(root).items()}
    launched = launches(monkeypatch)
    code, out, _ = run_main("study=smoke", f"dir={root}")
    assert code == 0 and launched == [] and "0 sweep(s) launched" in out
    after = report_files(root)
    assert len(after) == 8 and after == before
    # and each file reads back into the typed results it was written from, every key and value as it was
    for name in ("d16/verdict/comparison.json", "d32/verdict/comparison.json"):
        assert Report.from_json(json.loads(after[name])).to_json() == json.loads(after[name])
    assert ladder.Ladder.from_json(json.loads(after["ladder.json"])).to_json() == json.loads(after["ladder.json"])


def test_a_study_with_runs_missing_or_cut_short_resumes_to_the_same_reports(smoke_study, verdict, tmp_path, monkeypatch):
    root = tmp_path / "study"
    shutil.copytree(smoke_study[0], root, ignore=shutil.ignore_patterns(".mltrain.lock", "study.log"))
    shutil.rmtree(root / "d16" / "tune" / "multilevel" / "optim.lr=0.3,seed=0")  # never started
    cut = next((root / "d32" / "eval" / "single").glob("*seed=2,train.budget=2.0"))
    (cut / "summary.json").unlink()  # killed after its last checkpoint, before its summary
    (cut / "model.safetensors").unlink()
    for report in [root / "ladder.json", *root.glob("*/selection.json"), *root.glob("*/verdict/comparison.json")]:
        report.unlink()
    launched = launches(monkeypatch)
    code, out, _ = run_main("study=smoke", f"dir={root}")
    assert code == 0, out
    assert len(launched) == 2  # the sweeps that held the two runs; every other one was finished
    assert [line.split("]", 1)[1].split(":")[0].strip() for line in out.splitlines() if line.startswith("[")] == [
        "d16/tune/multilevel/optim.lr=0.3,seed=0", f"d32/eval/single/{cut.name}"]
    assert reports(root) == reports(smoke_study[0])


def test_progress_counts_the_evaluation_of_a_new_choice_when_stage_1_chooses_again(smoke_study, verdict, tmp_path):
    """A study whose grid grew: stage 1 chooses again, and the runs done are those of the new choice."""
    root = tmp_path / "study"
    shutil.copytree(smoke_study[0], root, ignore=shutil.ignore_patterns(".mltrain.lock", "study.log"))
    selection = root / "d16" / "selection.json"
    saved = json.loads(selection.read_text())
    chosen = saved["arms"]["multilevel"]["setting"]["optim.lr"]
    other = "0.03" if chosen == "0.3" else "0.3"
    saved["arms"]["multilevel"]["setting"]["optim.lr"] = other  # the choice of an earlier, smaller grid
    selection.write_text(json.dumps(saved))
    shutil.rmtree(root / "d16" / "tune" / "multilevel" / f"optim.lr={other},seed=0")  # the grid's new value
    cut = next((root / "d16" / "eval" / "single").glob("*seed=2,train.budget=2.0"))
    shutil.rmtree(cut)
    code, out, _ = run_main("study=smoke", f"dir={root}")
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert [line.split("]", 1)[1].split(":")[0].strip() for line in lines] == [
        f"d16/tune/multilevel/optim.lr={other},seed=0", f"d16/eval/single/{cut.name}"]
    assert lines[-1].startswith("[32/32] ") and "| 0 runs left" in lines[-1]
    assert json.loads(selection.read_text())["arms"]["multilevel"]["setting"]["optim.lr"] == chosen


def test_ctrl_c_stops_with_one_line_and_the_same_command_continues(smoke_study, verdict, tmp_path, monkeypatch):
    """The first scale's tuning runs copied from the smoke study, its 8 evaluation runs and every report
    left to make: Ctrl-C comes once 4 of them have ended. The runs are 0.1 s long, so the sweep's processes
    are frozen (SIGSTOP) from the moment the 4th is seen ended until the study has handed the Ctrl-C on:
    the stop lands with runs left however loaded the machine is (the study's own progress line can see the
    4th end only after the sweep, when its watcher is late)."""
    root = tmp_path / "study"
    shutil.copytree(smoke_study[0] / "d16" / "tune", root / "d16" / "tune")
    argv = ["study=smoke", f"dir={root}", "~ladder.d32"]

    def ended_runs() -> list[Path]:
        return [d for d in (root / "d16" / "eval").glob("*/*") if progress.ended(progress.run_status(d))]

    handed_on, stopped_at = threading.Event(), []
    real_hand_on, real_started = launch._hand_on, launch._Handoff.started

    def hand_on(proc, signum):
        real_hand_on(proc, signum)
        handed_on.set()

    def ctrl_c_after_four(proc):
        while proc.returncode is None:
            if len(done := ended_runs()) >= 4:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGSTOP)
                stopped_at.extend(done)
                os.kill(os.getpid(), signal.SIGINT)  # to the study, as from its terminal
                handed_on.wait(60)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)
                return
            time.sleep(0.005)

    def started(self, proc):
        real_started(self, proc)
        threading.Thread(target=ctrl_c_after_four, args=(proc,), daemon=True).start()

    monkeypatch.setattr(launch, "_hand_on", hand_on)
    monkeypatch.setattr(launch._Handoff, "started", started)
    code, out, _ = run_main(*argv)
    assert code == 130
    assert out.splitlines()[-1] == ("mltrain-study: stopped; every finished run is kept and interrupted ones resume: "
                                    f"continue with the same command: {shlex.join(['mltrain-study', *argv])}")
    done = ended_runs()
    left = 8 - len(done)
    assert handed_on.is_set() and 4 <= len(stopped_at) <= len(done) and left >= 1, done
    monkeypatch.setattr(launch, "_hand_on", real_hand_on)
    monkeypatch.setattr(launch._Handoff, "started", real_started)
    code, out, _ = run_main(*argv)
    assert code == 0, out
    assert sum(line.startswith("[") for line in out.splitlines()) == left  # the ones stopped or not started
    again, whole = reports(root), reports(smoke_study[0])
    assert again["scales"] == whole["scales"][:1] and again["selection"]["d16"] == whole["selection"]["d16"]


def test_a_study_changed_since_its_runs_is_refused_before_any_run(smoke_study, capsys):
    code, _, err = run_main("study=smoke", f"dir={smoke_study[0]}", "common=['scale=smoke','train.eval_interval=4',"
                            "'train.eval_tokens=192','multilevel.eval_every_cycle=false','device=cpu']", capsys=capsys)
    assert code == 2 and "holds a run made with other settings than this study's (train.eval_tokens (128 there, 192 here))" in err


# cpu_ladder's case is in tests/tools/test_study.py (its fixed-setting test prepares it already)
@pytest.mark.parametrize("name", ["paper_ladder", "depth_ladder", "data_ladder", "adamw_check"])
def test_every_setting_of_the_big_studies_composes_and_validates(name, request, tmp_path):
    if name == "paper_ladder":
        request.getfixturevalue("gpt2_cache")
    study = stages.prepare(compose_study([f"study={name}", f"dir={tmp_path}"]))
    assert set(study.labels) == set(study.cfg.ladder) and len(study.kinds) == len(study.cfg.ladder) * len(study.cfg.arms)
    assert not any(tmp_path.iterdir())  # checking writes nothing


def test_a_failing_run_is_named_with_its_reason_and_the_study_goes_on(verdict, tmp_path):
    # Valid config, impossible run: the vocabulary is only checked against the tokenizer's when a run builds.
    # One setting per arm and one evaluation seed, single-level with the two budgets a frontier needs: the
    # multilevel run fails, the single-level ones go on.
    code, out, _ = run_main("study=smoke", f"dir={tmp_path}", "~ladder.d32", "arms.multilevel.overrides=['model.vocab_size=100']",
                            "arms.single.grid={optim.lr:[0.3],train.budget:[0.5,2.0]}", "arms.multilevel.grid={optim.lr:[0.3]}",
                            "seeds=[1]")
    assert code == 1
    failed = [line for line in out.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and all("d16/tune/multilevel/" in line for line in failed)
    assert all("model.vocab_size=100 is smaller than the tokenizer's vocabulary (256)" in line for line in failed)
    assert sum(" val loss " in line for line in out.splitlines()) == 4  # single-level: 2 tuning, 2 frontier runs
    md = (tmp_path / "ladder.md").read_text()
    assert "d16/multilevel: stage 1 chose no setting" in md and "model.vocab_size=100 is smaller" in md


# ---------------------------------------------------------------------------------------------
# A ladder along each axis, end to end

AXIS_STUDY = """# @package _global_
name: axis_{axis}
ladder_axis: {axis}
common: [scale=smoke, train.eval_interval=4, train.eval_tokens=128, multilevel.eval_every_cycle=false, device=cpu]
arms:
  single: {{experiment: single, grid: {{optim.lr: [0.3], train.budget: [0.5, 2.0]}}}}
  multilevel: {{experiment: multilevel, grid: {{optim.lr: [0.3]}}}}
selection_seeds: [0]
seeds: [1]
tokens_per_param: 0.1
ladder: {ladder}
launcher: {{name: basic, env: {{OMP_NUM_THREADS: "1"}}}}
"""
AXIS_LADDERS = {  # axis -> (its rungs, the config key each rung's value is read from, the values)
    "depth": ("{a: {overrides: [model.n_layer=2]}, b: {overrides: [model.n_layer=4]}}", "model.n_layer", [2, 4]),
    "width": (None, "model.n_embd", [16, 32]),  # the smoke study's own rungs, d16 and d32, differ in width alone
    "tokens_per_param": ("{a: {tokens_per_param: 0.05}, b: {tokens_per_param: 0.1}}", None, None),
}


@pytest.mark.parametrize("axis", sorted(AXIS_LADDERS))
def test_a_ladder_along_each_axis_reads_its_values_from_the_configs_and_names_the_axis(axis, tmp_path, monkeypatch, request):
    """Width: the smoke study's finished runs reported along width (no run is needed for that)."""
    from matplotlib.figure import Figure

    rungs, key, values = AXIS_LADDERS[axis]
    if rungs is None:
        shutil.copytree(request.getfixturevalue("smoke_study")[0], tmp_path / "study",
                        ignore=shutil.ignore_patterns(".mltrain.lock", "study.log"))
        request.getfixturevalue("verdict")
        argv = ["study=smoke", f"dir={tmp_path / 'study'}", f"ladder_axis={axis}"]
    else:
        own = tmp_path / "conf" / "study"
        own.mkdir(parents=True)
        (own / f"axis_{axis}.yaml").write_text(AXIS_STUDY.format(axis=axis, ladder=rungs))
        argv = [f"study=axis_{axis}", f"dir={tmp_path / 'study'}", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"]
    drawn = {}
    real_savefig = Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        if Path(path).name == "ladder.png":
            ax = fig.axes[0]
            drawn.update(xlabel=ax.get_xlabel(), xticks=[t.get_text() for t in ax.get_xticklabels()])
        return real_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    code, out, _ = run_main(*argv)
    assert code == 0, out
    assert ("0 sweep(s) launched" in out) == (rungs is None)
    saved = json.loads((tmp_path / "study" / "ladder.json").read_text())
    assert saved["axis"] == axis and saved["axis_label"] == AXES[axis].title
    cfg = compose_study(argv[:1] + argv[2:])
    with compose.Composer() as composer:
        sizes = compose.ladder_sizes(cfg, composer)
        if key is not None:  # the value each rung's own composed config holds
            configs = [composer.compose([*cfg.common, *cfg.ladder[r].overrides], r) for r in cfg.ladder]
            assert [int(OmegaConf.select(c, key)) for c in configs] == values
        else:
            values = [sizes[r].tokens_per_param for r in cfg.ladder]
    assert [s["x"] for s in saved["scales"]] == pytest.approx(values)
    assert drawn["xlabel"].startswith(AXES[axis].title) and drawn["xticks"] == [f"{v:g}" for v in values]
    (trend,) = saved["trends"]
    word = AXES[axis].symbol
    assert f"with {word}" in trend["sentence"] and trend["verdict"] == "too few scales to tell"
    assert f"with {word}" in out
