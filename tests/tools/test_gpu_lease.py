"""scripts/gpu_lease.py, the lease command's helpers: which packages fail to import and which carried wheels
provide them (nothing else is installed, nothing downloaded), and the report: every part's status, the
logs in one tarball, and what the output folder may hold to come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_lease  # noqa: E402


def _wheels(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_only_modules_that_do_not_import_are_failing():
    assert gpu_lease.failing(["json", "no_such_module_for_the_lease", "numpy"]) == ["no_such_module_for_the_lease"]
    assert gpu_lease.failing() == []  # this venv holds everything a run needs


def test_wheels_are_matched_by_distribution_name_whatever_its_spelling(tmp_path):
    folder = _wheels(tmp_path / "w", "hydra_core-1.3.2-py3-none-any.whl", "PyYAML-6.0.2-cp312-cp312-manylinux.whl",
                     "antlr4_python3_runtime-4.9.3-py3-none-any.whl", "omegaconf-2.3.0-py3-none-any.whl")
    found, lacking = gpu_lease.wheels_for(["hydra", "yaml", "antlr4", "numpy"], folder)
    assert [w.name.split("-")[0] for w in found] == ["hydra_core", "PyYAML", "antlr4_python3_runtime"]
    assert lacking == ["numpy"]
    assert gpu_lease.wheels_for(["omegaconf"], tmp_path / "absent") == ([], ["omegaconf"])


def test_install_installs_only_the_failing_packages_offline(tmp_path, monkeypatch):
    folder = _wheels(tmp_path / "w", "omegaconf-2.3.0-py3-none-any.whl", "hydra_core-1.3.2-py3-none-any.whl",
                     "tqdm-4.66.0-py3-none-any.whl")
    calls = []
    monkeypatch.setattr(gpu_lease, "failing", lambda: ["omegaconf", "hydra"])
    monkeypatch.setattr(gpu_lease.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        type("Done", (), {"returncode": 0})())
    assert gpu_lease.install(folder, tmp_path / "site") == 0
    (cmd,) = calls
    assert {"--no-index", "--no-deps"} <= set(cmd) and cmd[cmd.index("--target") + 1] == str(tmp_path / "site")
    assert sorted(Path(c).name for c in cmd if c.endswith(".whl")) == ["hydra_core-1.3.2-py3-none-any.whl",
                                                                        "omegaconf-2.3.0-py3-none-any.whl"]
    calls.clear()
    monkeypatch.setattr(gpu_lease, "failing", lambda: [])
    assert gpu_lease.install(folder, tmp_path / "site") == 0 and calls == []  # nothing missing: no pip at all


def test_a_missing_package_without_a_wheel_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_lease, "failing", lambda: ["numpy"])
    assert gpu_lease.install(_wheels(tmp_path / "w"), tmp_path / "site") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "numpy" in lines[0] and "gpu_wheels.sh" in lines[0]


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "parts.tsv").write_text("device\tstart\t30\ndevice\tend\t0\t3\nbench\tstart\t150\nbench\tend\t124\t150\n"
                                    "paper\tnot_run\t150\tits limit is 150 s, 20 s were left of the 540 s deadline\n"
                                    "syncs\tstart\t150\n")
    (work / "device.out").write_text(json.dumps({"torch": "x", "device": "cpu"}) + "\n")
    (work / "bench.err").write_text("I Step 2: done compiler function inductor\n" * 3 + "x" * (3 * 2**20))
    (work / "run" / "nested").mkdir(parents=True)
    (work / "run" / "nested" / "metrics.jsonl").write_text('{"step": 1}\n')
    (work / "inductor").mkdir()
    (work / "inductor" / "kernel.json").write_text("{}")  # a cache: not brought back
    return work


def test_the_report_says_every_parts_status_and_packs_the_logs(tmp_path):
    dest = tmp_path / "out"
    assert gpu_lease.report(_work(tmp_path), dest, True, "bytes", 540, 530, "dry-run") == 1
    got = json.loads((dest / "gpu_check.json").read_text())
    parts = got["parts"]
    assert {n: p["status"] for n, p in parts.items()} == {"device": "ok", "bench": "timed_out", "paper": "not_run",
                                                          "syncs": "cut_off"}
    assert parts["paper"]["reason"].startswith("its limit is 150 s") and parts["bench"]["graphs"] == 3
    assert not got["ok"] and "cuda_tests: not reached" in got["problems"] and got["device"]["device"] == "cpu"
    assert got["outputs_beyond_limits"] == [] and sorted(p.name for p in dest.iterdir()) == ["gpu_check.json",
                                                                                              "logs.tar.gz"]
    with tarfile.open(dest / "logs.tar.gz") as tar:
        sizes = {m.name: m.size for m in tar.getmembers()}
    assert set(sizes) == {"parts.tsv", "device.out", "bench.err", "run/nested/metrics.jsonl"}
    assert sizes["bench.err"] == gpu_lease.LOG_TAIL  # its end


def test_outputs_that_would_not_come_back_are_named(tmp_path):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "fine.txt").write_text("")  # two folders down: comes back
    (tmp_path / "a" / "b" / "c" / "deep.txt").write_text("")
    (tmp_path / "odd name.txt").write_text("")
    assert gpu_lease.outputs_within_limits(tmp_path) == ["a/b/c/deep.txt: more than 2 folders down",
                                                         "odd name.txt: a name of other characters than letters, "
                                                         "digits, '.', '_', '-'"]
    for i in range(7):
        (tmp_path / f"f{i}").write_text("")
    assert gpu_lease.outputs_within_limits(tmp_path)[0] == "10 files, at most 8 come back"


def test_parts_left_out_by_parts_are_skipped_not_problems_and_the_cuda_tests_are_read_from_junit(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "parts.tsv").write_text("".join(f"{n}\tskipped\t60\tnot among --parts device,cuda_tests\n"
                                            for n in ("bench", "paper", "syncs", "smoke")) +
                                    "device\tstart\t15\ndevice\tend\t0\t3\ncuda_tests\tstart\t60\ncuda_tests\tend\t0\t9\n")
    (work / "device.out").write_text(json.dumps({"torch": "x", "device": "cpu"}) + "\n")
    (work / "cuda_tests.xml").write_text('<testsuites><testsuite tests="5" failures="0" errors="0" skipped="5"/>'
                                         '</testsuites>')
    dest = tmp_path / "out"
    assert gpu_lease.report(work, dest, True, "bytes", 540, 20, "dry-run") == 0
    got = json.loads((dest / "gpu_check.json").read_text())
    assert got["ok"] and got["problems"] == [] and got["cuda_tests"] == {"passed": 0, "failed": 0, "skipped": 5}
    assert {n: p["status"] for n, p in got["parts"].items()} == {
        "bench": "skipped", "paper": "skipped", "syncs": "skipped", "smoke": "skipped", "device": "ok", "cuda_tests": "ok"}
    assert got["parts"]["bench"]["reason"] == "not among --parts device,cuda_tests" and "graphs" not in got["parts"]["bench"]
    # on a GPU the same file is a problem: a CUDA test may not be skipped there
    assert gpu_lease.report(work, dest, False, "bytes", 540, 20, "gpu") == 1
    assert json.loads((dest / "gpu_check.json").read_text())["problems"] == [
        "cuda_tests: 5 skipped, 0 passed (none may be skipped)"]


def test_a_report_with_every_part_skipped_is_never_ok(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "parts.tsv").write_text("".join(f"{n}\tskipped\t60\tnot among --parts x\n" for n in gpu_lease.PARTS))
    dest = tmp_path / "out"
    assert gpu_lease.report(work, dest, True, "bytes", 540, 1, "dry-run") == 1
    got = json.loads((dest / "gpu_check.json").read_text())
    assert not got["ok"] and got["problems"] == ["nothing was measured: no part ran and passed"]


LEASE = Path(__file__).resolve().parents[2] / "scripts" / "gpu_lease.sh"


def _lease(tmp_path: Path, *args: str, out: Path) -> subprocess.CompletedProcess:

    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path / "tmp"), "OUT": str(out)}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(["bash", str(LEASE), "--dry-run", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("parts,why", [
    ("device bench", "joined by commas"), (",", "joined by commas"), ("device,", "joined by commas"),
    ("device,,bench", "joined by commas"), ("Device", "joined by commas"), ("device,benchmark", "no part is named 'benchmark'"),
])
def test_bad_parts_are_refused_in_one_line_before_any_part_runs(tmp_path, parts, why):
    out = tmp_path / "out"
    proc = _lease(tmp_path, "--parts", parts, out=out)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu_lease: error: --parts '{parts}'") and why in lines[0], lines
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []  # nothing written, no work folder


@pytest.mark.parametrize("make,why", [
    (lambda p: p.write_text("x"), "exists and is not a folder"),
    (lambda p: (p.mkdir(), (p / "gpu_check.json").write_text("{}")), "is not empty"),
    (lambda p: p.symlink_to(p.parent / "elsewhere"), "is a symbolic link"),
])
def test_an_out_that_is_not_a_new_or_empty_folder_is_refused_and_left_as_it_was(tmp_path, make, why):
    out = tmp_path / "out"
    make(out)
    (tmp_path / "tmp").mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    proc = _lease(tmp_path, "--parts", "device", out=out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"gpu_lease: error: OUT={out}"), lines
    assert why in lines[0]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    if out.is_dir() and not out.is_symlink():
        assert (out / "gpu_check.json").read_text() == "{}"


def test_an_out_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    proc = _lease(tmp_path, "--parts", "device", out=tmp_path / "file" / "out")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "cannot be created" in lines[0], lines
