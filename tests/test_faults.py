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
    code = textwrap.dedent(f"""
        import resource, sys
        for name, value in {limits or {}!r}.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        sys.argv = [{tool!r}, *sys.argv[1:]]
        from mltrain.cli import {entry}
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
        from mltrain.cli import prepare_main
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
    rows = [json.loads(x) for x in data.splitlines()]  # every line whole
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
    from mltrain.training.memory import parameter_count
    from mltrain.model import GPT, GPTConfig

    paper = GPTConfig(n_layer=12, n_head=8, n_embd=256, block_size=256, vocab_size=50257)
    assert parameter_count(paper) == (22_368_512, 0)
    small = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256, attention="explicit", bias=True)
    params, buffers = parameter_count(small)
    assert params == GPT(small).num_params() and buffers == 2 * 16 * 16  # one causal mask per block
