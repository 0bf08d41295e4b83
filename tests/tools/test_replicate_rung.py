"""scripts/replicate_rung.py: a rung's evaluated configurations from the records become plain `mltrain -m`
sweeps on new seeds, a seed the study used is refused, and the side-by-side table says whether the
replication's interval overlaps the study's."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "replicate_rung.py"
spec = importlib.util.spec_from_file_location("replicate_rung", SCRIPT)
replicate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(replicate)

COMMON = ["data=prose", "model.n_layer=4", "train.max_steps=100"]


def record(rung: Path, stage: str, arm: str, setting: list[str], seed: int) -> None:
    d = rung / stage / arm / f"{','.join(setting)},seed={seed}" / ".hydra"
    d.mkdir(parents=True)
    overrides = [*COMMON, *setting, f"seed={seed}", "train.resume=True", "train.progress=False",
                 "logger.tags=[x]", "logger.group=L4/x", "logger.job_type=eval"]
    (d / "overrides.yaml").write_text(yaml.safe_dump(overrides))


def verdict(path: Path, arms: dict[str, tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"label": label, "is_frontier": label == "single",
             "multiplier": {"headline": {"M": m, "M_lo": lo, "M_hi": hi}}} for label, (m, lo, hi) in arms.items()]
    path.write_text(json.dumps({"command": "mltrain-compare a b --out o --select-seeds 0 --tune optim.lr "
                                           "--tune multilevel.coarse_optim.lr", "arms": rows}))


@pytest.fixture
def rung(tmp_path):
    rung = tmp_path / "study" / "L4"
    record(rung, "tune", "single", ["experiment=single", "optim.lr=0.1"], 0)
    for seed in (1, 2):
        record(rung, "eval", "single", ["experiment=single", "optim.lr=0.3", "train.budget=0.5"], seed)
        record(rung, "eval", "single", ["experiment=single", "optim.lr=0.1", "train.budget=1.0"], seed)
        record(rung, "eval", "multilevel", ["experiment=multilevel", "optim.lr=0.3"], seed)
    verdict(rung / "verdict" / "comparison.json", {"single": (1.0, 1.0, 1.0), "ml": (1.1, 1.05, 1.2)})
    return rung


def test_each_evaluated_configuration_is_one_sweep_on_the_new_seeds_then_one_comparison(rung, tmp_path):
    todo = replicate.commands(rung, [11, 12], tmp_path / "rep")
    sweeps, compare = todo[:-1], todo[-1]
    assert len(sweeps) == 3  # two frontier budgets and the multilevel arm; tuning runs are not replicated
    for cmd in sweeps:
        assert cmd[:2] == ["mltrain", "-m"] and cmd[2:5] == COMMON and "seed=11,12" in cmd
        assert not any(w.startswith(("train.progress", "logger.", "hydra/launcher")) or w in ("seed=1", "seed=2")
                       for w in cmd)
        # the study's own resume flag is dropped; the replication's own makes a second invocation continue
        assert [w for w in cmd if w.startswith("train.resume")] == ["train.resume=true"]
    dirs = sorted(w.split("=", 1)[1] for c in sweeps for w in c if w.startswith("hydra.sweep.dir="))
    assert dirs == [str(tmp_path / "rep" / a) for a in ("multilevel/0", "single/0", "single/1")]
    assert compare == ["mltrain-compare", str(tmp_path / "rep"), "--out", str(tmp_path / "rep" / "verdict"),
                       "--tune", "optim.lr", "--tune", "multilevel.coarse_optim.lr"]


def test_jobs_run_the_sweeps_through_the_local_launcher_one_thread_each(rung, tmp_path, capsys):
    sweeps = replicate.commands(rung, [11], tmp_path / "rep", jobs=2)[:-1]
    assert all("hydra/launcher=local" in c and "hydra.launcher.n_jobs=2" in c for c in sweeps)
    assert replicate.main([str(rung), "--seeds", "11", "--out", str(tmp_path / "rep"), "--jobs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 mltrain -m ") for line in lines[:-1])
    assert lines[-1].startswith("mltrain-compare ")
    assert replicate.main([str(rung), "--seeds", "11", "--out", str(tmp_path / "rep1"), "--jobs", "1"]) == 0
    assert not any("OMP_NUM_THREADS" in line or "hydra/launcher" in line for line in capsys.readouterr().out.splitlines())
    with pytest.raises(SystemExit):
        replicate.main([str(rung), "--jobs", "0"])


def test_the_records_gitignore_keeps_what_a_study_keeps(tmp_path):
    import subprocess

    out = tmp_path / "rep"
    keep = ["multilevel/0/seed=11/summary.json", "multilevel/0/seed=11/.hydra/overrides.yaml",
            "multilevel/0/seed=11/metrics.jsonl", "verdict/comparison.md"]
    drop = ["multilevel/0/seed=11/checkpoints/last.pt", "multilevel/0/seed=11/train.log", "multilevel/0/multirun.yaml"]
    for f in keep + drop:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        (out / f).write_text("x")
    (out / ".gitignore").write_text(replicate.GITIGNORE)
    subprocess.run(["git", "init", "-q", str(out)], check=True)
    listed = subprocess.run(["git", "-C", str(out), "ls-files", "--others", "--exclude-standard"], check=True,
                            capture_output=True, text=True).stdout.split()
    assert sorted(listed) == sorted([".gitignore", *keep])


def test_a_printed_sweep_runs_as_mltrain_parses_it_and_a_second_invocation_skips_its_finished_runs(tmp_path):
    from helpers import tool_here

    rung = tmp_path / "study" / "L4"
    d = rung / "eval" / "single" / "experiment=single,seed=1" / ".hydra"
    d.mkdir(parents=True)
    (d / "overrides.yaml").write_text(yaml.safe_dump(["scale=smoke", "experiment=single", "seed=1",
                                                      "train.resume=True", "train.progress=False"]))
    verdict(rung / "verdict" / "comparison.json", {"single": (1.0, 1.0, 1.0)})
    sweep = replicate.commands(rung, [11], tmp_path / "rep")[0]
    assert sweep[0] == "mltrain" and 'hydra.sweep.subdir="seed=${seed}"' in sweep
    first = tool_here("mltrain", *sweep[1:], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = tmp_path / "rep" / "single" / "0" / "seed=11" / "summary.json"
    assert json.loads(summary.read_text())["status"] == "finished"
    again = tool_here("mltrain", *sweep[1:], cwd=tmp_path)
    assert again.returncode == 0 and "holds a finished run" in again.stdout + again.stderr


def test_a_seed_the_study_used_is_refused_before_anything_runs(rung, capsys):
    with pytest.raises(SystemExit) as out:
        replicate.main([str(rung), "--seeds", "0,11", "--run"])
    assert out.value.code == 2 and "used [0]" in capsys.readouterr().err


def test_a_seed_named_twice_is_refused_before_anything_runs(rung, capsys):
    with pytest.raises(SystemExit) as out:
        replicate.main([str(rung), "--seeds", "11,12,11", "--run"])
    assert out.value.code == 2 and "'11,12,11': a seed named twice" in capsys.readouterr().err


def test_the_printed_commands_are_shell_words(rung, capsys, tmp_path):
    assert replicate.main([str(rung), "--seeds", "11", "--out", str(tmp_path / "rep"), "--jobs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(shlex.split(line)[0] in ("mltrain", "mltrain-compare") for line in lines)


def test_the_table_says_whether_the_intervals_overlap(tmp_path):
    study, rep = tmp_path / "s.json", tmp_path / "r.json"
    verdict(study, {"single": (1.0, 1.0, 1.0), "ml": (1.1, 1.05, 1.2), "ctrl": (0.9, 0.8, 0.95), "gone": (1, 0.9, 1.1)})
    verdict(rep, {"single": (1.0, 1.0, 1.0), "ml": (1.25, 1.15, None), "ctrl": (1.02, 0.97, 1.08)})
    rows = {r.split(" | ")[0].strip("| "): r for r in replicate.side_by_side(study, rep)[2:]}
    assert rows["ml"].endswith("| yes |") and "∞" not in rows["ml"] and "inf×]" in rows["ml"]
    assert rows["ctrl"].endswith("| NO |") and "not measured" in rows["gone"] and "single" not in rows


def test_a_bound_is_printed_as_one_and_each_arm_by_its_readable_name(tmp_path):
    study, rep = tmp_path / "s.json", tmp_path / "r.json"
    verdict(study, {"single": (1.0, 1.0, 1.0), "ml": (None, 1.3, None)})  # a bound: beyond the data, M > 1.3
    verdict(rep, {"single": (1.0, 1.0, 1.0), "ml": (1.25, 1.05, 1.5)})
    named = json.loads(study.read_text())
    named["arms"][1]["arm"] = "multilevel · coarse lr 0.1"
    study.write_text(json.dumps(named))
    (row,) = replicate.side_by_side(study, rep)[2:]
    assert row == "| multilevel · coarse lr 0.1 | > 1.3× | 1.25× [1.05×, 1.5×] | yes |"


def test_the_rows_are_named_by_what_tells_them_apart():
    common = "multilevel.eval_every_cycle=False · multilevel.n_cycles=6"
    names = [f"multilevel · experiment=multilevel · multilevel.coarse_steps=352 · {common}",
             f"schedule_control · experiment=schedule_control · multilevel.coarse_steps=352 · {common}",
             f"schedule_control · experiment=schedule_control · steps × 0.5 · multilevel.coarse_steps=176 · {common}"]
    assert replicate.short_names(names) == ["multilevel · multilevel.coarse_steps=352",
                                            "schedule_control · multilevel.coarse_steps=352",
                                            "schedule_control · steps × 0.5 · multilevel.coarse_steps=176"]
    assert replicate.short_names(["ml · experiment=ml · lr 0.1"]) == ["ml · lr 0.1"]  # one row: only the repeat goes


def test_a_damaged_record_is_one_line_before_anything_runs(rung, capsys, tmp_path):
    (rung / "verdict" / "comparison.json").write_text('{"command": ')
    with pytest.raises(SystemExit) as out:
        replicate.main([str(rung), "--seeds", "11", "--out", str(tmp_path / "rep"), "--run"])
    assert out.value.code == 2 and "a record there is not readable (JSONDecodeError" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()
