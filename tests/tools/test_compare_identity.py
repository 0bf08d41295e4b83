"""mltrain-compare takes a run for what its files say it is: a folder copied beside its original is one
run (counted once, named in one warning line), and runs on other data never become the reference
silently (the largest consistent group is compared, the others named; --data-group chooses). Against
the installed tool, from a fresh folder outside the repository."""

from __future__ import annotations

import json
import shutil

from helpers import DATA, linear_run, tool

OTHER_DATA = {**DATA, "description": "text notes.txt, bytes: 5,000 train / 500 val tokens"}


def compare(tmp_path, runs, *extra):
    out = tmp_path / "report"
    proc = tool("mltrain-compare", str(runs), "--smooth", "1", "--out", str(out), *extra, cwd=tmp_path)
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
