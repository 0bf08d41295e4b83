"""mltrain-compare takes a run for what its files say it is: a folder copied beside its original is one
run (the same config, seed, data *and result*: counted once, named in one warning line), a rerun with
another result is kept and named, never chosen by its path; runs on other data never become the
reference silently (the largest consistent group is compared, the others named by the field that
differs; --data-group chooses); a run folder compare cannot read is listed as left out with the reason;
runs that differ only in train.batch_size share their held-out set and are all compared. Against the
installed tool, from a fresh folder outside the repository."""

from __future__ import annotations

import json
import shutil

from helpers import DATA, linear_run, tool_here

OTHER_DATA = {**DATA, "description": "text notes.txt, bytes: 5,000 train / 500 val tokens"}


def compare(tmp_path, runs, *extra):
    out = tmp_path / "report"
    proc = tool_here("mltrain-compare", str(runs), "--smooth", "1", "--out", str(out), *extra, cwd=tmp_path)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc, out


def warnings(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("mltrain-compare: warning: ")]


def test_a_run_folder_copied_beside_its_original_is_counted_once_and_named(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1, 2, 3):
        linear_run(runs, f"s{seed}", "single", "default", seed, flops=1e14, val=3.0 + 0.01 * seed,
                   summary={"config_digest": "a1b2c3d4e5f60718"})
    linear_run(runs, "m0", "multilevel", "experiment=multilevel", 0, flops=1e14, val=2.9,
               summary={"config_digest": "ffff000011112222"})
    shutil.copytree(runs / "m0", runs / "m0 copy")
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [w for w in warnings(proc) if "counted once" in w]
    assert len(said) == 1 and "m0 copy" in said[0] and str(runs / "m0") in said[0], proc.stderr
    report = json.loads((out / "comparison.json").read_text())
    entry = next(e for e in report["configurations"] if e["run_kind"] == "multilevel")
    assert entry["n_seeds"] == 1  # one seed, not two
    assert [e["status"] for e in report["excluded"]] == ["duplicate"]
    assert any("counted once" in w for w in report["warnings"])


def test_a_run_with_its_own_digest_is_another_run_though_its_label_and_seed_match(tmp_path):
    runs = tmp_path / "runs"
    linear_run(runs, "a", "single", "default", 0, flops=1e14, val=3.0, summary={"config_digest": "1" * 16})
    linear_run(runs, "b", "single", "default", 0, flops=1e14, val=3.1, summary={"config_digest": "2" * 16})
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0 and not any("counted once" in w for w in warnings(proc)), proc.stderr
    assert json.loads((out / "comparison.json").read_text())["excluded"] == []


def test_a_stray_run_on_other_data_is_named_and_the_three_that_agree_are_compared(tmp_path):
    runs = tmp_path / "runs"
    linear_run(runs, "a_stray", "single", "default", 0, flops=1e14, val=2.0, summary={"data": OTHER_DATA})
    for seed in (1, 2, 3):
        linear_run(runs, f"b{seed}", "single", "default", seed, flops=1e14, val=3.0)
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [w for w in warnings(proc) if "differ in data" in w]
    assert len(said) == 1 and "compared 3 runs on data 'embedded" in said[0] and "a_stray" in said[0], proc.stderr
    assert "--data-group" in said[0]
    report = json.loads((out / "comparison.json").read_text())
    assert [(e["run"].rsplit("/", 1)[1], e["status"]) for e in report["excluded"]] == [("a_stray", "mismatch")]

    proc, out = compare(tmp_path, runs, "--data-group", OTHER_DATA["description"])  # the user chooses the other
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "comparison.json").read_text())
    assert sorted(e["run"].rsplit("/", 1)[1] for e in report["excluded"]) == ["b1", "b2", "b3"]

    proc, _ = compare(tmp_path, runs, "--data-group", "no such data")
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 1 and len(errors) == 1 and "--data-group 'no such data'" in errors[0], proc.stderr


def test_runs_that_differ_only_in_batch_size_are_compared_with_none_left_out(tmp_path):
    sweep = tmp_path / "runs"
    proc = tool_here("mltrain", "-m", "scale=smoke", "train.batch_size=2,4", "train.progress=false", "device=cpu",
                     f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    held = [json.loads(p.read_text())["held_out"] for p in sorted(sweep.rglob("summary.json"))]
    assert len(held) == 2 and held[0] == held[1]  # one held-out set, whatever the batch
    proc, out = compare(tmp_path, sweep)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "comparison.json").read_text())
    assert report["excluded"] == [] and not any("differ in" in w for w in report["warnings"])
    labels = sorted(c["label"] for c in report["configurations"])
    assert len(labels) == 2 and labels[0].endswith("train.batch_size=2") and labels[1].endswith("train.batch_size=4")


def test_a_run_folder_without_metrics_is_listed_as_left_out_with_the_reason(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        linear_run(runs, f"s{seed}", "single", "default", seed, flops=1e14, val=3.0 + 0.01 * seed)
    lost = linear_run(runs, "lost", "single", "default", 2, flops=1e14, val=2.5)
    (lost / "run.json").write_text(json.dumps({"run_kind": "single", "label": "default", "seed": 2}))
    (lost / "metrics.jsonl").unlink()
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "comparison.json").read_text())
    [entry] = report["excluded"]
    assert entry["run"] == str(lost) and entry["seed"] == 2 and entry["status"] == "no metrics"
    assert "no metrics.jsonl beside its summary.json and run.json" in entry["reason"]
    assert "lost" in (out / "comparison.md").read_text()


def test_a_rerun_with_another_result_is_kept_and_named_not_chosen_by_path(tmp_path):
    runs = tmp_path / "runs"
    digest = {"config_digest": "a1b2c3d4e5f60718"}
    for seed in (1, 2):
        linear_run(runs, f"b{seed}", "single", "default", seed, flops=1e14, val=3.0, summary=digest)
    linear_run(runs, "a_rerun", "single", "default", 0, flops=1e14, val=3.2, summary=digest)
    linear_run(runs, "z_sweep", "single", "default", 0, flops=1e14, val=3.0, summary=digest)
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "comparison.json").read_text())
    assert report["excluded"] == []  # neither folder of seed 0 is dropped
    said = [w for w in report["warnings"] if "different results" in w]
    assert len(said) == 1 and "a_rerun (final val loss 3.2" in said[0] and "z_sweep (final val loss 3" in said[0]
    assert not any("counted once" in w for w in report["warnings"])


def test_runs_of_two_model_sizes_are_told_apart_by_their_parameter_count(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        linear_run(runs, f"small{seed}", "single", "default", seed, flops=1e14, val=3.0, summary={"n_params": 812544})
    for seed in (0, 1):
        linear_run(runs, f"large{seed}", "single", "model.n_layer=8", seed, flops=2e14, val=2.8,
                   summary={"n_params": 1625088})
    proc, out = compare(tmp_path, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [w for w in warnings(proc) if "differ in" in w]
    assert len(said) == 1, proc.stderr
    assert "runs differ in model (parameters): compared 3 runs with model (parameters) 812,544" in said[0]
    assert "left out 2 runs with model (parameters) 1,625,088" in said[0] and "differ in data" not in said[0]
    report = json.loads((out / "comparison.json").read_text())
    assert sorted(e["status"] for e in report["excluded"]) == ["mismatch", "mismatch"]

    proc, _ = compare(tmp_path, runs, "--data-group", "no such data")  # the groups named by their size
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert "3 runs with model (parameters) 812,544; 2 runs with model (parameters) 1,625,088" in errors[0]
