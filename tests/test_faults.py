"""Bad input and faults, one class at a time (issue 11). Every case through a console entry point asserts
the exit status, exactly one error line on stderr, no traceback, and that earlier output is byte for
byte unchanged. `scripts/fault_matrix.py` runs the same classes against any source tree and counts."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import typing
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, compose_config

from mltrain.runs import rundir
from mltrain.config import Config, validate
from mltrain.data import load_tokens, shards
from mltrain.errors import ConfigError, DataError, StorageError
from mltrain.runs.files import read_metrics
from mltrain.runs.tracking import Tracker

SMOKE = ["scale=smoke", "train.progress=false"]
ERROR_WORDS = re.compile(r"error|traceback|exception", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# helpers


def cli(tool: str, *args: str, cwd: Path, limits: dict | None = None, env: dict | None = None,
        timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a console entry point (`mltrain`, `mltrain-prepare`, `mltrain-compare`) in a fresh process,
    optionally under resource limits (RLIMIT_FSIZE: a full disk; RLIMIT_AS: no room for a huge model)."""
    entry = {"mltrain": "train_main", "mltrain-prepare": "prepare_main", "mltrain-compare": "compare_main"}[tool]
    module = "mltrain.cli" if tool == "mltrain" else "mltrain.console"  # as pyproject.toml's scripts name them
    code = textwrap.dedent(f"""
        import resource, sys
        for name, value in {limits or {}!r}.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        sys.argv = [{tool!r}, *sys.argv[1:]]
        from {module} import {entry}
        {entry}()
    """)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def one_error(proc: subprocess.CompletedProcess, tool: str = "mltrain", code: int = 2, kind: str = "error") -> str:
    """Assert `proc` stopped with `code` and exactly one error line (`<tool>: <kind>: ...`) on stderr,
    no traceback anywhere; return that line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in proc.stderr.splitlines() if ERROR_WORDS.search(line) or line.startswith(f"{tool}: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"{tool}: {kind}: "), errors
    assert not ERROR_WORDS.search(proc.stdout), proc.stdout[-2000:]
    return errors[0]


def tree(path: Path) -> dict[str, bytes]:
    """Every file under `path` (hidden ones included) with its bytes: "earlier output" to compare."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory nobody can create files in (root ignores permission bits: /sys refuses even root)."""
    if os.geteuid() != 0:
        d = tmp_path / "read_only"
        d.mkdir()
        d.chmod(0o555)
        return d
    probe = Path("/sys/mltrain_probe")
    try:
        probe.mkdir()
    except OSError:
        return Path("/sys")
    probe.rmdir()
    pytest.skip("no directory here refuses root")


def earlier_run(path: Path) -> Path:
    """A run directory as a killed run leaves it: .hydra/, a log and some rows, no summary."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 7\n")
    (path / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (path / "cli.log").write_text("[earlier] started\n")
    (path / "metrics.jsonl").write_text('{"step": 0, "flops": 0.0, "val/loss": 5.5}\n')
    return path


# ---------------------------------------------------------------------------------------------
# Runs that mix


def test_a_run_dir_in_use_by_a_live_run_is_refused_and_untouched(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "cli.log").write_text("the live run's log\n")  # it has not written a metrics row yet
    with open(run_dir / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # what a live run holds for its whole life
        before = tree(run_dir)
        proc = cli("mltrain", *SMOKE, f"hydra.run.dir={run_dir}", cwd=tmp_path)
        line = one_error(proc)
    assert "is in use by another mltrain run" in line and str(run_dir) in line
    assert tree(run_dir) == before


@pytest.mark.slow
def test_two_runs_started_together_into_one_dir_never_mix(tmp_path):
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "mltrain.cli", *SMOKE, f"hydra.run.dir={run_dir}"]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], [r[2][-2000:] for r in results]
    loser = next(r for r in results if r[0] == 2)
    one_error(subprocess.CompletedProcess(args, loser[0], loser[1], loser[2]))
    rows = read_metrics(run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    # one run's rows: each eval step once, the last row is the summary's
    evals = [r["step"] for r in rows if "val/loss" in r]
    assert evals == sorted(set(evals)) and rows[-1]["flops"] == summary["total_flops"]


@pytest.mark.slow
def test_default_run_dirs_are_unique_even_within_one_second(tmp_path):
    # Earlier runs sit in every default dir name of the next minute: as if started in the same second.
    now = datetime.now()
    taken = {}
    for s in range(90):
        t = now + timedelta(seconds=s)
        d = tmp_path / "outputs" / t.strftime("%Y-%m-%d") / t.strftime("%H-%M-%S")
        taken[d] = earlier_run(d)
    before = {d: tree(d) for d in taken}
    proc = cli("mltrain", *SMOKE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {d: tree(d) for d in taken} == before
    (summary,) = [p for p in (tmp_path / "outputs").rglob("summary.json") if p.parent not in taken]
    assert re.fullmatch(r"\d\d-\d\d-\d\d-1", summary.parent.name)


def test_unique_dir_claims_a_new_name_in_every_process(tmp_path):
    # each process starts a run in the folder it got (an empty one is removed when its process ends)
    code = "from mltrain.runs.rundir import unique_dir; d = unique_dir('out/12-00-00'); open(d + '/run', 'w'); print(d)"
    names = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout.strip() for _ in range(3)]
    assert names == ["out/12-00-00", "out/12-00-00-1", "out/12-00-00-2"]
    assert rundir.unique_dir(str(tmp_path / "x")) == rundir.unique_dir(str(tmp_path / "x"))  # stable in a process


def test_rerunning_a_sweep_over_killed_jobs_leaves_their_hydra_files_alone(tmp_path):
    sweep = tmp_path / "sweep"
    earlier_run(sweep / "scale=smoke,seed=0")  # killed: .hydra/, log, rows, no summary.json
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    before = tree(sweep)
    proc = cli("mltrain", "-m", *SMOKE, "seed=0,1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    line = one_error(proc)
    assert "holds earlier runs" in line
    assert tree(sweep) == before


def test_a_sweep_dir_in_use_by_a_live_sweep_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    with open(sweep / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = cli("mltrain", "-m", *SMOKE, "seed=0", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
        line = one_error(proc)
    assert "hydra.sweep.dir" in line and "in use" in line
    assert [p.name for p in sweep.iterdir()] == [rundir.LOCK_FILE]


def test_in_process_runs_hold_the_lock_and_give_it_back(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / rundir.LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="in use by another mltrain run"):
            rundir.claim(run_dir)
    with rundir.claim(run_dir):
        assert rundir.holds(run_dir)
        with rundir.claim(run_dir):  # nested claims (RunGuard, then run()) in one process
            pass
        assert rundir.holds(run_dir)
        other = open(run_dir / rundir.LOCK_FILE, "a")
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.close()
    assert not rundir.holds(run_dir)


def test_a_lock_file_left_by_a_killed_run_does_not_block(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rundir.LOCK_FILE).write_text("999999\n")  # killed before its first row: the kernel dropped the lock
    with rundir.claim(run_dir):
        assert (run_dir / rundir.LOCK_FILE).read_text() == f"{os.getpid()}\n"


# ---------------------------------------------------------------------------------------------
# Keys that vanish


@pytest.mark.parametrize("override,named,suggested", [
    ("+train.max_step=3", "train.max_step", "train.max_steps"),
    ("++train.max_step=3", "train.max_step", "train.max_steps"),
    ("+foo=1", "foo", None),
    ("+model.n_layers=2", "model.n_layers", "model.n_layer"),
    ("+multilevel.coarse_optim.lr_min=0.1", "multilevel.coarse_optim.lr_min", None),
    ("+data.paths=x.txt", "data.paths", "data.path"),
])
def test_a_key_outside_the_schema_is_refused_with_or_without_plus(override, named, suggested):
    with pytest.raises(ConfigError) as err:
        validate(compose_config(override))
    msg = str(err.value)
    assert msg.startswith(f"{named} is not an mltrain key")
    if suggested:
        assert f"did you mean {suggested}?" in msg


def test_a_key_outside_the_schema_stops_the_cli_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    line = one_error(cli("mltrain", *SMOKE, "+train.max_step=3", f"hydra.run.dir={out}", cwd=tmp_path))
    assert "train.max_step is not an mltrain key (did you mean train.max_steps?" in line
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Values that slip through


def _numeric_keys(schema: type = Config, prefix: str = "") -> list[tuple[str, type]]:
    """Every float and int key of the schema, dotted, with its number type."""
    import dataclasses

    keys = []
    for name, hint in typing.get_type_hints(schema).items():
        if typing.get_origin(hint) is list:  # optim.betas: checked element by element (test_ranges_name_the_key)
            continue
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        sub = next((a for a in args if dataclasses.is_dataclass(a)), None)
        if sub is not None:
            keys += _numeric_keys(sub, f"{prefix}{name}.")
        elif args[0] in (float, int):
            keys.append((f"{prefix}{name}", args[0]))
    return keys


NUMERIC_KEYS = _numeric_keys()


def test_the_schema_has_numeric_keys_to_check():
    names = dict(NUMERIC_KEYS)
    assert {"optim.lr", "optim.eps", "train.grad_clip", "multilevel.coarse_optim.lr", "seed"} <= names.keys()


@pytest.mark.parametrize("key", [k for k, t in NUMERIC_KEYS if t is float])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_key_must_be_finite_and_is_named(key, value):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}={value}"):
        validate(compose_config("coarsening=evenodd", f"{key}={value}"))


@pytest.mark.parametrize("key", [k for k, t in NUMERIC_KEYS if t is int])
def test_every_int_key_must_fit_in_64_bits_and_is_named(key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=\d+ is out of range"):
        validate(compose_config("coarsening=evenodd", f"{key}={2**64}"))


@pytest.mark.parametrize("overrides,named", [
    (["optim=adamw", "optim.eps=0"], "optim.eps=0.0 must be > 0"),
    (["optim=adamw", "optim.eps=-1e-8"], "optim.eps=-1e-08 must be > 0"),
    (["coarsening=evenodd", "multilevel.coarse_optim.eps=0"], "multilevel.coarse_optim.eps=0.0 must be > 0"),
    (["optim.betas=[0.9,nan]"], "optim.betas=[0.9, nan]"),
    (["model.vocab_size=0"], "model.vocab_size=0 must be > 0"),
    (["optim.lr=0"], "optim.lr=0.0 must be > 0"),
    (["train.grad_clip=-1"], "train.grad_clip=-1.0 must be >= 0"),
])
def test_ranges_name_the_key(overrides, named):
    with pytest.raises(ConfigError) as err:
        validate(compose_config(*overrides))
    assert str(err.value).startswith(named)


def test_a_nan_value_stops_the_cli_with_its_key_before_anything_is_built(tmp_path):
    out = tmp_path / "out"
    line = one_error(cli("mltrain", *SMOKE, "optim=adamw", "optim.eps=nan", f"hydra.run.dir={out}", cwd=tmp_path))
    assert line == "mltrain: error: optim.eps=nan must be a finite number"
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Tracebacks for ordinary trouble


def test_an_unwritable_run_dir_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    line = one_error(cli("mltrain", *SMOKE, f"hydra.run.dir={blocker}/run", cwd=tmp_path))
    assert f"cannot create hydra.run.dir={blocker}/run" in line
    assert blocker.read_text() == "not a folder\n"
    ro = unwritable_dir(tmp_path)
    line = one_error(cli("mltrain", *SMOKE, f"hydra.run.dir={ro}/run", cwd=tmp_path))
    assert f"cannot create hydra.run.dir={ro}/run" in line


def test_an_unwritable_working_dir_is_one_line(tmp_path):
    ro = unwritable_dir(tmp_path)
    line = one_error(cli("mltrain", *SMOKE, cwd=ro))
    assert "cannot create hydra.run.dir=outputs/" in line


def test_an_unwritable_token_cache_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(cli("mltrain", *SMOKE, f"data.cache_dir={blocker}/cache", f"hydra.run.dir={tmp_path / 'run'}",
                         cwd=tmp_path))
    assert "token cache" in line and str(blocker) in line


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


PREPARE = ["prepare.tokenizer=bytes", "prepare.shard_tokens=2000", "prepare.val_tokens=1000",
           "prepare.progress=false", "prepare.docs_per_task=4"]


def test_a_malformed_jsonl_line_given_to_prepare_is_one_line(tmp_path):
    data = _jsonl(tmp_path / "docs.jsonl", [json.dumps({"text": "good " * 50})] * 20 + ['{"text": "broken'])
    out = tmp_path / "out"
    proc = cli("mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=1",
               f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE, cwd=tmp_path)
    line = one_error(proc, "mltrain-prepare")
    assert "prepare.data_files=" in line and "docs.jsonl" in line


def test_prepare_errors_go_to_stderr_like_mltrain(tmp_path):
    proc = cli("mltrain-prepare", f"prepare.data_files={tmp_path / 'none.jsonl'}", f"prepare.out_dir={tmp_path / 'o'}",
               *PREPARE, cwd=tmp_path)
    line = one_error(proc, "mltrain-prepare")
    assert "matches no files" in line and proc.stdout == ""


def test_prepare_into_an_unwritable_out_dir_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(cli("mltrain-prepare", f"prepare.out_dir={blocker}/out", *PREPARE, cwd=tmp_path), "mltrain-prepare")
    assert f"prepare.out_dir={blocker}/out" in line


@pytest.mark.slow
def test_ctrl_c_during_prepare_is_one_line_exit_130_and_resumable(tmp_path):
    data = _jsonl(tmp_path / "docs.jsonl", [json.dumps({"text": f"document {i} " * 40}) for i in range(200)])
    out = tmp_path / "out"
    args = [f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=2",
            f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE]
    # Ctrl-C reaches the whole foreground process group (main process and tokenizer workers) right after
    # the first training shard is committed.
    code = textwrap.dedent("""
        import os, signal, sys
        from mltrain.data import prepare
        def ctrl_c(path):
            if "_train_" in path.name:
                os.killpg(os.getpgid(0), signal.SIGINT)
        prepare._after_shard = ctrl_c
        sys.argv = ["mltrain-prepare", *sys.argv[1:]]
        from mltrain.console import prepare_main
        prepare_main()
    """)
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    line = one_error(proc, "mltrain-prepare", code=130, kind="interrupted")
    assert "2 finished shards" in line and "run the same command again to resume" in line
    done = cli("mltrain-prepare", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "prepare_state.json").read_text())["done"]


def _fake_run(root: Path, name: str, kind: str, label: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    rows = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - math.log(i) * (1.3 if kind != "single" else 1.0),
             "level": 0} for i in range(1, 50)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"run_kind": kind, "label": label, "seed": 0, "total_flops": 49e9}))
    return d


def test_compare_into_a_read_only_out_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    _fake_run(runs, "a", "single", "default")
    _fake_run(runs, "b", "multilevel", "coarsening=evenodd")
    before = tree(runs)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(cli("mltrain-compare", str(runs), "--out", f"{blocker}/report", cwd=tmp_path), "mltrain-compare")
    assert str(blocker) in line
    ro = unwritable_dir(tmp_path)
    line = one_error(cli("mltrain-compare", str(runs), "--out", f"{ro}/report", cwd=tmp_path), "mltrain-compare")
    assert str(ro) in line
    assert tree(runs) == before


# ---------------------------------------------------------------------------------------------
# Full disk


@pytest.fixture
def warm_cache():
    """The embedded corpus tokenized once, so a file-size limit hits the run's own files, not the cache."""
    load_tokens(compose_config().data)


@pytest.mark.slow
def test_a_full_disk_keeps_whole_rows_and_stops_with_one_line(tmp_path, warm_cache):
    run_dir = tmp_path / "run"
    limit = 12_000  # bytes per file: .hydra/ and the log fit, metrics.jsonl does not
    proc = cli("mltrain", *TINY, "train.max_steps=200", "train.log_interval=1", "train.eval_interval=50",
               f"hydra.run.dir={run_dir}", cwd=tmp_path, limits={"RLIMIT_FSIZE": limit})
    line = one_error(proc)
    metrics = run_dir / "metrics.jsonl"
    assert str(metrics) in line and "the run stopped" in line
    data = metrics.read_bytes()
    assert 0 < len(data) <= limit and data.endswith(b"\n")
    rows = read_metrics(metrics, strict=True)  # every line whole
    kept = int(re.search(r"keeps its ([\d,]+) whole rows", line).group(1).replace(",", ""))
    assert len(rows) == kept and f"to step {rows[-1]['step']}" in line
    assert read_metrics(metrics) == rows  # compare's reader skips nothing
    assert not (run_dir / "summary.json").exists() and not list(run_dir.glob(".*.tmp"))


def test_a_full_disk_at_the_end_of_a_run_says_what_is_kept(tmp_path, warm_cache):
    run_dir = tmp_path / "run"
    proc = cli("mltrain", *SMOKE, f"hydra.run.dir={run_dir}", cwd=tmp_path,
               limits={"RLIMIT_FSIZE": 50_000})  # the rows fit; the final checkpoint (~270 kB) does not
    line = one_error(proc)
    assert "cannot write a checkpoint" in line and "no checkpoint was kept" in line
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert rows and rows[-1]["step"] == 6  # every row, whole
    assert not (run_dir / "model.safetensors").exists() and not (run_dir / "summary.json").exists()
    assert not list(run_dir.rglob(".*.tmp"))


def test_a_full_disk_while_tokenizing_leaves_no_cache_entry(tmp_path):
    cache = tmp_path / "cache"
    proc = cli("mltrain", *SMOKE, f"data.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
               limits={"RLIMIT_FSIZE": 100_000})  # the corpus' train split is ~1.6 MB
    line = one_error(proc)
    assert "cannot write the token cache" in line and "File too large" in line
    assert [p for p in cache.rglob("*") if p.is_file()] == []  # no partial entry, no temporaries


def test_a_full_disk_while_preparing_keeps_the_finished_shards(tmp_path):
    data = _jsonl(tmp_path / "docs.jsonl", [json.dumps({"text": f"document {i} " * 40}) for i in range(100)])
    out = tmp_path / "out"
    proc = cli("mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=1",
               f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE, "prepare.shard_tokens=20000",
               cwd=tmp_path, limits={"RLIMIT_FSIZE": 30_000})  # the val shard fits, a train shard does not
    line = one_error(proc, "mltrain-prepare")
    assert "File too large" in line and "1 finished shard" in line
    assert [p.name for p in out.glob("*.bin")] == ["fineweb_edu_val_000000.bin"]


class _FullAfter:
    """os.write that lets `budget` bytes through, then fails like a full disk (short write first)."""

    def __init__(self, budget: int):
        self.budget, self.real = budget, os.write

    def __call__(self, fd: int, data) -> int:
        if self.budget <= 0:
            raise OSError(28, "No space left on device")
        n = self.real(fd, bytes(data[: self.budget]))
        self.budget -= n
        return n


def test_a_row_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    t = Tracker(tmp_path, {"name": "jsonl"}, {}, name="n", group="g", job_type="single")
    t.log({"step": 1, "flops": 1.0, "train/loss": 2.0})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(os, "write", _FullAfter(10))
    with pytest.raises(StorageError, match=r"keeps its 1 whole rows \(to step 1\)"):
        t.log({"step": 2, "flops": 2.0, "train/loss": 1.5})
    monkeypatch.undo()
    t.finish()
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_a_summary_that_cannot_be_written_says_what_is_kept(tmp_path, monkeypatch):
    t = Tracker(tmp_path, {"name": "jsonl"}, {}, name="n", group="g", job_type="single")
    t.log({"step": 1, "flops": 1.0})

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mltrain.runs.tracking.write_json_atomic", full)
    with pytest.raises(StorageError, match="summary.json .No space left on device.* keeps all its 1 rows"):
        t.write_summary({"a": 1})
    t.finish()


# ---------------------------------------------------------------------------------------------
# Data that is not text


@pytest.mark.parametrize("kind", ["random bytes", "token shard"])
def test_a_binary_data_path_is_refused_naming_the_file(tmp_path, kind):
    path = tmp_path / "data.txt"
    rng = np.random.default_rng(0)
    if kind == "random bytes":
        path.write_bytes(rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    else:  # uint16 ids below 256: every other byte is NUL, which is valid UTF-8
        shards.write_shard(path, rng.integers(32, 127, 25_000))
    out = tmp_path / "out"
    line = one_error(cli("mltrain", *SMOKE, "data=text", f"data.path={path}", f"hydra.run.dir={out}", cwd=tmp_path))
    assert f"{path} is not UTF-8 text" in line and "data.allow_binary=true" in line
    assert not (out / "metrics.jsonl").exists()


def test_allow_binary_trains_on_it_and_the_cache_remembers(tmp_path, train_run):
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 60_000, dtype=np.uint8).tobytes())
    _, summary = train_run("data=text", f"data.path={path}", "data.allow_binary=true", "train.max_steps=2")
    assert summary["fine_steps"] == 2
    with pytest.raises(DataError, match="is not UTF-8 text"):  # the cached tokens do not bypass the check
        load_tokens(compose_config("data=text", f"data.path={path}").data)


def test_text_with_a_few_undecodable_bytes_is_still_text(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(("plain text line\n" * 500).encode() + b"caf\xe9 \x00 end\n")
    splits = load_tokens(compose_config("data=text", f"data.path={path}").data)
    assert len(splits.train[0]) > 7000


def test_a_shard_folder_without_a_validation_shard_says_which_it_used(tmp_path, caplog):
    for name in ("b.bin", "a.bin", "c.bin"):
        shards.write_shard(tmp_path / name, np.arange(5000) % 256)
    with caplog.at_level("WARNING"):
        splits = load_tokens(compose_config("data=shards", f"data.dir={tmp_path}", "data.tokenizer=bytes").data)
    assert "validation: a.bin, the first shard" in splits.description
    assert any("holding out its first shard, a.bin" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# Expensive before cheap

# Under a 6 GB address-space limit an attempt to build the huge model would fail loudly; the check
# must stop the run before, in one line.
NO_ROOM = {"RLIMIT_AS": 6 * 2**30}


def test_a_context_longer_than_the_data_is_refused_before_the_model_is_built(tmp_path):
    out = tmp_path / "out"
    line = one_error(cli("mltrain", *SMOKE, "model.block_size=100000000", f"hydra.run.dir={out}", cwd=tmp_path,
                         limits=NO_ROOM))
    assert "fewer than block_size + 1 = 100000001" in line
    assert not (out / "metrics.jsonl").exists()


@pytest.mark.parametrize("overrides,size", [
    (["model.n_layer=64", "model.n_embd=16384", "model.n_head=16"], "206,162,886,656 parameters (64 blocks"),
    (["train.batch_size=20000000"], "logits of a 20000000-sequence micro-batch"),
])
def test_a_model_that_cannot_fit_is_refused_with_its_size_before_allocating(tmp_path, overrides, size):
    out = tmp_path / "out"
    line = one_error(cli("mltrain", *SMOKE, *overrides, f"hydra.run.dir={out}", cwd=tmp_path, limits=NO_ROOM))
    assert "training it needs at least" in line and size in line
    assert not (out / "metrics.jsonl").exists()


def test_the_parameter_count_comes_without_allocating_and_matches_the_model():
    from mltrain.memory import parameter_count
    from mltrain.model import GPT, GPTConfig

    paper = GPTConfig(n_layer=12, n_head=8, n_embd=256, block_size=256, vocab_size=50257)
    assert parameter_count(paper) == (22_368_512, 0)
    small = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256, attention="explicit", bias=True)
    params, buffers = parameter_count(small)
    assert params == GPT(small).num_params() and buffers == 2 * 16 * 16  # one causal mask per block


# =============================================================================================
# Round two (issue 20): files outside the run, foreign state, bounded resources, the tools' inputs.
# Function calls where one exercises the same code path; a subprocess only where the process
# boundary is the point (Hydra's own writes, pipes, signals, ranks, workers).

import errno  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from mltrain.errors import CheckpointError  # noqa: E402
from mltrain import atomic  # noqa: E402
from mltrain.runs import provenance, sweep  # noqa: E402
from mltrain.runs.weights import INFO_FILE, WEIGHTS_FILE, canonical_safetensors, load_weights, save_weights  # noqa: E402
from mltrain.training import checkpoint as ckpt  # noqa: E402
from mltrain.training import distributed  # noqa: E402

VICTIM = b"a file outside the run, nobody's to change\n" * 100


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(VICTIM)
    return path


def _fault_matrix():
    """scripts/fault_matrix.py as a module: the tests check the process table as its cases do."""
    import importlib.util

    if "fault_matrix" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fault_matrix", Path(__file__).resolve().parents[1] / "scripts"
                                                      / "fault_matrix.py")
        sys.modules["fault_matrix"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["fault_matrix"])
    return sys.modules["fault_matrix"]


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (psutil is no dependency: /proc)."""
    return _fault_matrix().leftovers(marker)


def small_session(*overrides: str):
    from mltrain.run import build

    return build(compose_config("train.max_steps=6", "train.eval_batches=1", *overrides), lambda row: None)


# ---------------------------------------------------------------------------------------------
# Writes through links


@pytest.mark.parametrize("name", [rundir.LOCK_FILE, "metrics.jsonl", ".hydra/config.yaml", ".hydra/hydra.yaml", "cli.log",
                                  "wandb", "checkpoints/step-000001-00000001.pt"])
def test_a_link_where_mltrain_or_hydra_writes_is_refused_and_its_target_untouched(tmp_path, name):
    target = victim(tmp_path)
    link = tmp_path / "run" / name
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    with pytest.raises(StorageError, match=r"it is a symbolic link") as err:
        rundir.claim(tmp_path / "run", allow_earlier=True)
    assert str(link) in str(err.value)
    assert target.read_bytes() == VICTIM and not rundir.holds(tmp_path / "run")


def test_a_link_in_a_job_dir_of_a_sweep_is_refused(tmp_path):
    target = victim(tmp_path)
    (tmp_path / "sweep" / "seed=0" / ".hydra").mkdir(parents=True)
    (tmp_path / "sweep" / "seed=0" / ".hydra" / "overrides.yaml").symlink_to(target)
    with pytest.raises(StorageError, match="overrides.yaml: it is a symbolic link"):
        rundir.claim(tmp_path / "sweep", what="hydra.sweep.dir", earlier=rundir.earlier_sweep, allow_earlier=True)
    assert target.read_bytes() == VICTIM


def test_metrics_are_never_cut_or_appended_through_a_link(tmp_path):
    target = victim(tmp_path)
    (tmp_path / "metrics.jsonl").symlink_to(target)
    for resume in (None, {"metrics_bytes": 10, "metrics_rows": 0}):
        with pytest.raises(StorageError, match="symbolic link"):
            Tracker(tmp_path, {"name": "jsonl"}, {}, name="n", group="g", job_type="single", resume=resume)
    assert target.read_bytes() == VICTIM


def test_caches_checkpoints_and_reports_are_never_written_through_links(tmp_path, capsys):
    from mltrain.console import compare_main
    from mltrain.data.cache import TokenCache

    target = victim(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tokens").symlink_to(target.parent)
    with pytest.raises(StorageError, match="tokens: it is a symbolic link"):
        TokenCache(tmp_path / "cache", "text", "bytes", "k" * 64).build(np.dtype(np.uint16), lambda writers: {})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").symlink_to(target.parent)
    runner = SimpleNamespace(trainer=SimpleNamespace(state=SimpleNamespace(fine_steps=1, optimizer_steps=1)))
    with pytest.raises(StorageError, match="checkpoints: it is a symbolic link"):
        ckpt.CheckpointFolder(tmp_path / "run").save(runner)
    runs = tmp_path / "runs"
    _fake_run(runs, "a", "single", "default")
    _fake_run(runs, "b", "multilevel", "coarsening=evenodd")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "comparison.md").symlink_to(target)
    with pytest.raises(SystemExit) as code:
        compare_main([str(runs), "--out", str(tmp_path / "report")])
    assert code.value.code == 2 and "comparison.md: it is a symbolic link" in capsys.readouterr().err
    assert [p.name for p in target.parent.iterdir()] == ["victim.txt"] and target.read_bytes() == VICTIM


# ---------------------------------------------------------------------------------------------
# Foreign or damaged state


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    """A checkpoint of a small single-level run after 3 steps, and the session that wrote it."""
    s = small_session()
    s.runner.run(should_stop=lambda: s.trainer.state.fine_steps >= 3)
    path = ckpt.save_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-000003-00000003.pt", s.runner,
                                {"metrics_bytes": 0, "metrics_rows": 0})
    return path


@pytest.mark.parametrize("overrides,named", [
    (["seed=1"], "seed=0 there, 1 here"),
    (["optim.lr=0.5"], "optim.lr=0.2 there, 0.5 here"),  # the demo scale's tuned LR there
    (["train.grad_clip=0.5"], "train.grad_clip=1.0 there, 0.5 here"),
])
def test_a_checkpoint_of_another_run_of_the_same_shape_is_refused_naming_the_key(saved_checkpoint, overrides, named):
    other = small_session(*overrides)
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        ckpt.load_checkpoint(saved_checkpoint, other.runner)
    assert "is from another run" in str(err.value) and named in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in other.model.state_dict().items())


def test_bookkeeping_keys_do_not_change_a_runs_identity_but_its_data_does(saved_checkpoint, tmp_path):
    same = small_session("train.progress=true", "train.checkpoint_interval=7", "logger.project=x")
    ckpt.load_checkpoint(saved_checkpoint, same.runner)  # loads
    assert same.trainer.state.fine_steps == 3
    text = tmp_path / "notes.txt"
    text.write_text("some words to train on\n" * 4000)
    on_text = small_session("data=text", f"data.path={text}")
    path = ckpt.save_checkpoint(tmp_path / "text.pt", on_text.runner)
    text.write_text("other words, the same config\n" * 4000)  # the file edited between stop and resume
    with pytest.raises(CheckpointError, match="trained on other data"):
        ckpt.load_checkpoint(path, small_session("data=text", f"data.path={text}").runner)
    a = np.arange(100_000, dtype=np.uint16)
    b = a.copy()
    b[70_000] += 1
    assert ckpt.data_fingerprint([a]) == ckpt.data_fingerprint([a.copy()]) != ckpt.data_fingerprint([a[:-1]])
    assert ckpt.data_fingerprint([a], [a]) != ckpt.data_fingerprint([a, a])


def _folder_with(tmp_path: Path, saved: Path, n: int) -> ckpt.CheckpointFolder:
    folder = ckpt.CheckpointFolder(tmp_path)
    folder.path.mkdir()
    for i in range(n):
        shutil.copy(saved, folder.path / f"step-00000{i + 1}-0000000{i + 1}.pt")
    return folder


def test_a_damaged_newest_checkpoint_is_named_once_and_an_older_one_used(saved_checkpoint, tmp_path, caplog):
    folder = _folder_with(tmp_path, saved_checkpoint, 3)
    newest, middle = folder.files()[-1], folder.files()[-2]
    newest.write_bytes(b"")
    middle.write_bytes(middle.read_bytes()[:5000])
    s = small_session()
    with caplog.at_level("WARNING"):
        path, extra = ckpt.load_latest(folder, s.runner)
    assert path == folder.path / "step-000001-00000001.pt" and s.trainer.state.fine_steps == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and f"{newest}: it is empty" in warnings[0] and str(middle) in warnings[1]
    assert newest.exists() and folder.files() == [path]  # left in place, never counted again


@pytest.mark.parametrize("damage", ["garbage", "code", "no optimizer", "not a dict"])
def test_checkpoints_that_cannot_load_are_one_line_never_torchs_weights_only_advice(saved_checkpoint, tmp_path, damage):
    folder = _folder_with(tmp_path, saved_checkpoint, 1)
    path = folder.files()[0]
    if damage == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    elif damage == "code":
        torch.save({"x": SimpleNamespace()}, path)  # a pickled object, not tensors and plain values
    else:
        payload = torch.load(path, weights_only=True)
        if damage == "no optimizer":
            del payload["runner"]["fine_optimizer"]
        torch.save(payload if damage == "no optimizer" else [payload], path)
    s = small_session()
    before = {k: v.clone() for k, v in s.model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        ckpt.load_latest(folder, s.runner)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and "weights_only" not in message, message
    assert all(torch.equal(before[k], v) for k, v in s.model.state_dict().items())


@pytest.mark.parametrize("content", [b'{"status": "fin', b'["finished"]', b"\xff\xfe"])
def test_a_cut_or_list_valued_summary_is_one_line_naming_it(tmp_path, content):
    from mltrain.training.resume import previous_run

    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(ConfigError, match=r"summary.json is unreadable .*nothing was changed"):
        previous_run(tmp_path)


def test_a_dir_without_hydra_records_is_not_resumed_under_the_cli(tmp_path):
    from hydra import initialize_config_module

    from mltrain.training.resume import check_resume

    run_dir = earlier_run(tmp_path / "run")
    shutil.rmtree(run_dir / ".hydra")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "step-000001-00000001.pt").write_bytes(b"x")
    cfg = compose_config()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):  # as under the CLI
        with pytest.raises(ConfigError, match="without its .hydra/config.yaml"):
            check_resume(run_dir, cfg)
    assert check_resume(run_dir, cfg) is not None  # from Python: the checkpoint will prove it


@pytest.mark.parametrize("edit,ok", [(lambda d: d, True), (lambda d: b'{"a": 1}\n' + d, False),
                                     (lambda d: d[:-3], False), (lambda d: d + b"more\n", True)])
def test_metrics_are_cut_only_at_the_row_boundary_the_checkpoint_recorded(tmp_path, edit, ok):
    rows = b"".join(json.dumps({"step": i}).encode() + b"\n" for i in range(5))
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(edit(rows))
    before = path.read_bytes()
    if ok:
        atomic.cut_at_row(path, len(rows), 5)
        assert path.read_bytes() == rows
    else:
        with pytest.raises(ConfigError, match="changed since"):
            atomic.cut_at_row(path, len(rows), 5)
        assert path.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Records overwritten


def test_sweep_points_that_would_share_a_job_dir_are_refused_before_hydra_writes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    line = one_error(cli("mltrain", "-m", *SMOKE, "train.checkpoint_interval=5,6", f"hydra.sweep.dir={sweep_dir}",
                         cwd=tmp_path))
    assert "would share the job dir" in line and "train.checkpoint_interval" in line
    assert not sweep_dir.exists()


def test_a_run_that_diverges_leaves_no_earlier_weights_and_the_tools_say_why(tmp_path, capsys):
    from mltrain.model import GPT, GPTConfig
    from mltrain.run import RunDiverged, run
    from mltrain.tools.sample import main as sample_main

    run_dir = tmp_path / "run"
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    with pytest.raises(RunDiverged):
        run(compose_config("optim.lr=1e30", "train.grad_clip=0", "train.max_steps=6"), run_dir=run_dir)
    assert not (run_dir / WEIGHTS_FILE).exists() and not (run_dir / INFO_FILE).exists()
    assert sample_main([str(run_dir)]) == 2
    assert "holds a run that diverged" in capsys.readouterr().err
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    with pytest.raises(DataError, match="is from before the run diverged"):  # a run dir of an older mltrain
        load_weights(run_dir)


def test_equal_weights_give_byte_identical_files(tmp_path):
    from safetensors.torch import save

    tensors = {"b": torch.ones(3), "a": torch.zeros(2)}
    metadata = {"format": "pt", "producer": "mltrain-gpt", "tokenizer": "bytes", "z": "1", "m": "2"}
    orders = [list(metadata.items()), list(reversed(metadata.items()))]
    blobs = {canonical_safetensors(save(tensors, metadata=dict(items))) for items in orders for _ in range(4)}
    assert len(blobs) == 1
    blob = blobs.pop()
    header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
    assert list(header["__metadata__"]) == sorted(metadata)
    from safetensors.torch import load

    assert all(torch.equal(load(blob)[k], v) for k, v in tensors.items())


# ---------------------------------------------------------------------------------------------
# Unbounded resources


def _launcher(n_jobs) -> OmegaConf:
    return OmegaConf.create({"hydra": {"launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                                                                 "JoblibLauncher", "n_jobs": n_jobs}}})


@pytest.mark.parametrize("n_jobs", [0, -1, -3, 10_000, "auto"])
def test_parallel_jobs_are_bounded_by_the_cpus(n_jobs):
    with pytest.raises(ConfigError, match=rf"^hydra.launcher.n_jobs={n_jobs} .*nothing was started"):
        sweep.check_launcher(_launcher(n_jobs))
    sweep.check_launcher(_launcher(1))
    sweep.check_launcher(_launcher(sweep.available_cpus()))


def test_a_bad_n_jobs_leaves_the_sweep_dir_free(tmp_path):
    sweep_dir = tmp_path / "sweep"
    line = one_error(cli("mltrain", "-m", *SMOKE, "hydra/launcher=local", "hydra.launcher.n_jobs=0", "seed=0,1",
                         f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path))
    assert "hydra.launcher.n_jobs=0" in line and not sweep_dir.exists()


@pytest.mark.slow
def test_no_worker_outlives_a_killed_sweep(tmp_path):
    marker = f"mltrain-test-{uuid.uuid4().hex}"
    sweep_dir = tmp_path / "sweep"
    with open(tmp_path / "sweep.err", "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "mltrain.cli", "-m", *SMOKE, "train.max_steps=100000",
                              "hydra/launcher=local", "hydra.launcher.n_jobs=2", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                             env={**os.environ, "MLTRAIN_TEST_MARKER": marker, "OMP_NUM_THREADS": "1"})
        try:
            deadline = time.monotonic() + 120
            while len(list(sweep_dir.glob("*/metrics.jsonl"))) < 2 and time.monotonic() < deadline:
                assert p.poll() is None, (tmp_path / "sweep.err").read_text()[-2000:]
                time.sleep(0.2)
            assert len(processes_with(marker)) >= 3  # the sweep and its two workers
        finally:
            p.kill()
            p.wait()
    deadline = time.monotonic() + 60
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_with(marker)
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left
    assert "stopped by SIGTERM" in (tmp_path / "sweep.err").read_text()  # each run wrote its checkpoint first


@pytest.fixture
def weights_dir(tmp_path):
    from mltrain.model import GPT, GPTConfig

    torch.manual_seed(0)
    run_dir = tmp_path / "run"
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    return run_dir


@pytest.mark.parametrize("field,value,named", [
    ("n_embd", 10**6, "of weights"), ("n_layer", 10**9, "of weights"), ("vocab_size", 2**39, "of weights"),
    ("n_head", 3, "not divisible"), ("block_size", -4, "model.block_size is -4"), ("n_layer", "2", "model.n_layer is '2'"),
    ("dropout", 1.5, "model.dropout"), ("bias", "yes", "model.bias"), ("n_embd", True, "model.n_embd is True"),
])
def test_model_json_is_checked_before_anything_is_allocated(weights_dir, field, value, named):
    info = json.loads((weights_dir / INFO_FILE).read_text())
    info["model"][field] = value
    (weights_dir / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(DataError, match=re.escape(named)):
        load_weights(weights_dir)


def test_sampling_streams_and_holds_only_one_context(weights_dir):
    from itertools import islice

    from mltrain.tools.sample import stream

    model, _ = load_weights(weights_dir)
    tokens = list(islice(stream(model, [104], 10**15, temperature=1.0, generator=torch.Generator().manual_seed(0)), 300))
    assert len(tokens) == 300  # a generator: 10**15 asked, 300 made


# ---------------------------------------------------------------------------------------------
# Distributed faults


@pytest.mark.parametrize("env,named", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc'"), ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 and WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"), ({"SLURM_NTASKS": "4", "SLURM_PROCID": "-1"}, "SLURM_PROCID=-1"),
])
def test_rank_variables_that_are_not_a_rank_are_one_line(env, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        distributed.world_from_env(env)
    assert distributed.world_from_env({"RANK": "1", "WORLD_SIZE": "2"}) == distributed.World(1, 0, 2)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_ranks_without_a_launcher_say_what_is_missing_and_time_out(monkeypatch):
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="needs MASTER_ADDR and MASTER_PORT"):
        distributed.rendezvous(distributed.World(0, 0, 2))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv(distributed.RENDEZVOUS_TIMEOUT_ENV, "1")
    for rank in (0, 1):  # rank 0 waiting for the others; rank 1 waiting for rank 0
        monkeypatch.setenv("MASTER_PORT", _free_port())
        started = time.monotonic()
        with pytest.raises(ConfigError, match=rf"rank {rank} of 2: the 2 ranks did not all meet .* within 1 s"):
            distributed.rendezvous(distributed.World(rank, rank, 2))
        assert time.monotonic() - started < 30
    monkeypatch.setenv(distributed.RENDEZVOUS_TIMEOUT_ENV, "0")
    with pytest.raises(ConfigError, match="MLTRAIN_RENDEZVOUS_TIMEOUT_S='0'"):
        distributed.rendezvous_timeout()


def test_a_lost_peer_is_recognised_only_in_a_process_group(monkeypatch):
    gloo = RuntimeError("[/x/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer. More")
    assert distributed.lost_peer(gloo) is None  # no group: not a lost peer
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)  # as in rank 1 of a job of 2
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    line = distributed.lost_peer(gloo)
    assert line.startswith("rank 1 of 2 lost contact with the other ranks (Read error [127.0.0.1]:1: Connection "
                           "reset by peer)")
    assert distributed.lost_peer(ValueError("shapes differ")) is None
    with pytest.raises(distributed.RanksLost):
        with distributed.one_line_when_a_rank_is_lost():
            raise gloo


def _ranks(tmp_path: Path, marker: str, *args: str) -> list[subprocess.Popen]:
    port = _free_port()
    procs = []
    for r in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(r), "LOCAL_RANK": str(r),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "MLTRAIN_TEST_MARKER": marker}
        procs.append(subprocess.Popen([sys.executable, "-m", "mltrain.cli", *SMOKE, "device=cpu", *args,
                                       f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"rank{r}.err", "w")))
    return procs


def _stderr_of_ranks(tmp_path: Path, procs: list, timeout: float = 120) -> list[str]:
    try:
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(tmp_path / f"rank{r}.err").read_text() for r in range(len(procs))]


@pytest.mark.slow
def test_a_batch_the_ranks_cannot_split_is_said_once(tmp_path):
    marker = uuid.uuid4().hex
    procs = _ranks(tmp_path, marker, "train.batch_size=3")
    err = "".join(_stderr_of_ranks(tmp_path, procs))
    assert [p.returncode for p in procs] == [2, 2]
    one_error(subprocess.CompletedProcess([], 2, "", err))
    assert "divisible by the number of processes (2)" in err and not processes_with(marker)


@pytest.mark.slow
def test_a_rank_killed_mid_run_stops_the_other_with_one_line(tmp_path):
    marker = uuid.uuid4().hex
    procs = _ranks(tmp_path, marker, "train.max_steps=100000", "train.eval_interval=1000")
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while (not metrics.exists() or metrics.read_bytes().count(b"\n") < 3) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), (tmp_path / "rank0.err").read_text()[-2000:]
        time.sleep(0.2)
    procs[1].kill()
    err0, _ = _stderr_of_ranks(tmp_path, procs, timeout=60)
    line = one_error(subprocess.CompletedProcess([], procs[0].returncode, "", err0))
    assert "rank 0 of 2 lost contact with the other ranks" in line and "train.resume=true" in line
    assert not processes_with(marker)


# ---------------------------------------------------------------------------------------------
# Lines that lie or fail


@pytest.mark.parametrize("name", ["runs, (ü) a", "it's here", "a=b [x] {y}", "x\\", "$HOME#1", "12-00-00", "plain-dir_1.2"])
def test_the_resume_command_quotes_run_dirs_for_hydra_and_the_shell(tmp_path, name):
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mltrain.training.resume import resume_command

    run_dir = tmp_path / name
    words = shlex.split(resume_command(run_dir).split("  (plus")[0])
    assert words[:2] == ["mltrain", "train.resume=true"]
    assert OverridesParser.create().parse_override(words[2]).value() == str(run_dir.resolve())


def test_a_permission_error_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(ckpt, "save_checkpoint", denied)
    runner = SimpleNamespace(trainer=SimpleNamespace(state=SimpleNamespace(fine_steps=1, optimizer_steps=1)))
    with pytest.raises(StorageError) as err:
        ckpt.CheckpointFolder(tmp_path).save(runner)
    assert "Permission denied: the folder does not allow" in str(err.value) and "full" not in str(err.value)
    assert "full" in atomic.full_or_denied(OSError(errno.ENOSPC, "No space left on device"))
    assert atomic.full_or_denied(OSError(errno.EIO, "Input/output error")) == "Input/output error"


def test_a_corrupt_tiktoken_cache_is_named_and_kept(tmp_path, monkeypatch):
    import tiktoken.registry

    from mltrain.data.tokenizers import get_tokenizer

    fixtures = next((p / "shared" / "fixtures" / "gpt2-bpe" for p in Path(__file__).resolve().parents
                     if (p / "shared" / "fixtures" / "gpt2-bpe").is_dir()), None)
    if fixtures is None:
        pytest.skip("GPT-2 BPE fixtures not found")
    from conftest import GPT2_CACHE_NAMES

    for name, cached in GPT2_CACHE_NAMES.items():
        data = (fixtures / name).read_bytes()
        (tmp_path / cached).write_bytes(data[:-100] if name == "vocab.bpe" else data)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "gpt2", raising=False)
    with pytest.raises(DataError) as err:
        get_tokenizer("gpt2")
    assert "is damaged" in str(err.value) and "download" not in str(err.value)
    assert (tmp_path / GPT2_CACHE_NAMES["vocab.bpe"]).exists()  # tiktoken would have deleted it


def test_a_key_wandb_rejects_is_not_called_missing():
    from mltrain.runs.wandb_mirror import _api_key_problem

    class AuthenticationError(Exception):
        pass

    def rejecting(**kwargs):
        raise AuthenticationError("API key must have 40+ characters, has 5.")

    assert "W&B rejected the API key" in _api_key_problem(SimpleNamespace(login=rejecting))
    assert "no W&B API key found" in _api_key_problem(SimpleNamespace(login=lambda **kw: False))
    assert _api_key_problem(SimpleNamespace(login=lambda **kw: True)) is None


# ---------------------------------------------------------------------------------------------
# The tools' edges (mltrain-sample, mltrain-export)


class _Reader:
    """A stdout whose reader goes away (`error`: BrokenPipeError) or a user who presses Ctrl-C
    (KeyboardInterrupt) after `after` writes."""

    def __init__(self, error: type, after: int):
        self.error, self.after, self.text = error, after, ""

    def write(self, text: str) -> int:
        self.after -= 1
        if self.after == 0:
            raise self.error
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("error,code,said", [(BrokenPipeError, 141, ""), (KeyboardInterrupt, 130, "interrupted")])
def test_sample_stops_quietly_when_its_reader_goes_and_in_one_line_on_ctrl_c(weights_dir, monkeypatch, capsys, error,
                                                                               code, said):
    from mltrain.tools.sample import main

    out = _Reader(error, after=20)
    monkeypatch.setattr(sys, "stdout", out)
    assert main([str(weights_dir), "--max-new-tokens", "1000000000000"]) == code
    err = capsys.readouterr().err
    assert len(out.text) > 0 and "Traceback" not in err
    assert err.strip().splitlines() == ([] if not said else [f"mltrain-sample: {said}: stopped by Ctrl-C; the text "
                                                            f"above is what was generated"])


def test_sample_edges_temperature_and_prompt(weights_dir, capsys):
    from mltrain.tools.sample import generate, main

    model, _ = load_weights(weights_dir)
    tiny = generate(model, [104, 105], 30, temperature=1e-45, generator=torch.Generator().manual_seed(0))
    assert tiny == generate(model, [104, 105], 30, temperature=0)  # all the probability on the likeliest
    for args, named in ((["--temperature", "inf"], "--temperature inf"), (["--prompt", "caf\udce9"], "not valid UTF-8")):
        assert main([str(weights_dir), *args]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith("mltrain-sample: error: ") and named in line and "\n" not in line


def test_export_into_a_place_it_cannot_write_is_one_line_and_leaves_nothing(weights_dir, tmp_path, monkeypatch):
    from mltrain.tools import export

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match=rf"cannot write {re.escape(str(blocker))}/out.*nothing was exported"):
        export.export(weights_dir, blocker / "out")

    def full(path, *args, **kwargs):
        raise OSError(errno.EFBIG, "File too large", str(path))

    monkeypatch.setattr(export, "write_json", full)  # the weights fit, the config does not
    with pytest.raises(StorageError, match="File too large: the disk, the quota or the file-size limit is full"):
        export.export(weights_dir, tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------------------------------
# Secrets


@pytest.mark.parametrize("key,secret", [
    ("hydra.job.env_set.WANDB_API_KEY", True), ("HF_TOKEN", True), ("MY_DB_PASSWORD", True), ("api_key", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("GITHUB_TOKEN2", True), ("data.tokenizer", False), ("prepare.max_tokens", False),
    ("train.keep_checkpoints", False), ("KEYBOARD", False), ("logger.entity", False),
])
def test_secret_looking_keys(key, secret):
    assert provenance.is_secret_key(key) is secret


def test_secrets_are_redacted_in_commands_trees_and_yaml_files(tmp_path):
    argv = ["mltrain", "seed=1", "+hydra.job.env_set.WANDB_API_KEY=abc123", "+hydra.job.env_set={HF_TOKEN: xyz}"]
    assert provenance.redact_argv(argv) == ["mltrain", "seed=1", "+hydra.job.env_set.WANDB_API_KEY=<redacted>",
                                            "+hydra.job.env_set=<redacted>"]
    assert "abc123" not in provenance.provenance(torch.device("cpu"), argv)["command"]
    tree = {"hydra": {"job": {"env_set": {"WANDB_API_KEY": "abc123", "OMP_NUM_THREADS": "1"}},
                      "overrides": {"hydra": ["+hydra.job.env_set.WANDB_API_KEY=abc123"], "task": ["seed=1"]}}}
    yaml = tmp_path / "hydra.yaml"
    yaml.write_text(OmegaConf.to_yaml(OmegaConf.create(tree)))
    clean = tmp_path / "overrides.yaml"
    clean.write_text("- seed=1\n")
    provenance.redact_yaml_files([yaml, clean, tmp_path / "missing.yaml"])
    assert "abc123" not in yaml.read_text() and "OMP_NUM_THREADS: '1'" in yaml.read_text()
    assert clean.read_text() == "- seed=1\n"  # nothing to redact: left byte for byte


def test_a_run_records_no_secret_anywhere(tmp_path):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    run_dir = tmp_path / "run"
    proc = cli("mltrain", *SMOKE, f"+hydra.job.env_set.WANDB_API_KEY={secret}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert secret not in proc.stdout + proc.stderr
    assert [p for p, data in tree(run_dir).items() if secret.encode() in data] == []
    assert "WANDB_API_KEY=<redacted>" in (run_dir / ".hydra" / "hydra.yaml").read_text()
