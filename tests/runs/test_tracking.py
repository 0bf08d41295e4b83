"""Tracker: metrics.jsonl / summary.json, labels, and the real wandb package in offline mode.

W&B runs are read back from the `.wandb` transaction log they write (leveldb-log framing of
`wandb_internal_pb2.Record` protobufs; wandb 0.31 ships no Python reader, so `_read_wandb_log` below
decodes the framing and wandb's own protobuf classes decode the records)."""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mltrain.config import LoggerConfig
from mltrain.runs.files import read_metrics, write_json_atomic
from mltrain.runs.names import run_label, run_name
from mltrain.runs.tracking import Tracker


TRAIN_ROWS = [
    {"step": 0, "flops": 0.0, "tokens": 0, "time_s": 0.0, "train/loss": 5.5, "lr": 1e-3, "level": 0, "phase": "fine"},
    {"step": 1, "flops": 2.0e9, "tokens": 1024, "time_s": 0.1, "train/loss": 5.0, "lr": 1e-3, "level": 1,
     "phase": "coarse", "coarse_model": 0, "cycle": 0},
    {"step": 2, "flops": 4.0e9, "tokens": 2048, "time_s": 0.2, "train/loss": 4.5, "lr": 1e-3, "level": 0,
     "phase": "fine", "cycle": 0},
]
VAL_ROW = {"step": 2, "flops": 4.0e9, "tokens": 2048, "time_s": 0.3, "val/loss": 4.75, "level": 0}
DIAG_ROW = {"step": 2, "flops": 4.0e9, "tokens": 2048, "time_s": 0.3, "diag/coarse_loss": 4.9,
            "diag/fine_loss": 4.6, "diag/grad_cosine": 0.42, "cycle": 0, "coarse_model": 0, "level": 1}
CONFIG = {"seed": 1, "model": {"n_layer": 4, "n_embd": 128}, "multilevel": {"delta": 0.5}}


# ---------------------------------------------------------------------------------------------
# helpers


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """Keep wandb inside tmp_path, silent, with no credentials and no inherited mode."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP",
                "WANDB_JOB_TYPE", "WANDB_NAME", "WANDB_TAGS", "WANDB_INIT_TIMEOUT", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    env = {
        "HOME": home,
        "NETRC": home / ".netrc",
        "WANDB_CONFIG_DIR": tmp_path / "wandb_config",
        "WANDB_CACHE_DIR": tmp_path / "wandb_cache",
        "WANDB_DATA_DIR": tmp_path / "wandb_data",
        "WANDB_ARTIFACT_DIR": tmp_path / "wandb_artifacts",
        "WANDB_DIR": tmp_path / "wandb_dir",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_X_DISABLE_STATS": "true",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    import wandb

    wandb.teardown()  # forget settings/credentials a previous test in this process may have loaded
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()
    wandb.teardown()


def _read_wandb_log(path: Path) -> list:
    """Records of a `.wandb` file: 7-byte header `:W&B` + 0xBEE1 + version, then 32 KiB blocks of
    leveldb-log records (crc32 u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, parts, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a header never straddles blocks: the writer pads with zeros
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            out.append(parts + chunk)
    records = []
    for raw in out:
        rec = pb.Record()
        rec.ParseFromString(raw)
        records.append(rec)
    return records


def _offline_run(run_dir: Path, which: int | None = None) -> dict:
    """Decode the one offline W&B run under run_dir/wandb (or the `which`-th, by time) into plain dicts."""
    import wandb

    # wandb-core writes the transaction log asynchronously: run.finish() can return ~0.1 s before the
    # last records reach the file. Shutting the service down (as at interpreter exit) flushes it.
    wandb.teardown()
    dirs = sorted((run_dir / "wandb").glob("offline-run-*"))
    if which is None:
        assert len(dirs) == 1, dirs
    files = list(dirs[which or 0].glob("run-*.wandb"))
    assert len(files) == 1, files
    out = {"history": [], "config": {}, "summary": {}, "metrics": {}, "run": None, "exit": None}
    key = lambda item: "/".join(item.nested_key) if item.nested_key else item.key  # noqa: E731
    for rec in _read_wandb_log(files[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            out["history"].append({key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "run":
            out["run"] = rec.run
            out["config"].update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
        elif kind == "config":
            out["config"].update({key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "summary":
            out["summary"].update({key(i): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "metric":
            out["metrics"][rec.metric.name or rec.metric.glob_name] = rec.metric.step_metric
        elif kind == "exit":
            out["exit"] = rec.exit
    return out


def _wandb_cfg(**kw) -> LoggerConfig:
    return LoggerConfig(**{"name": "wandb", "project": "mltrain-test", "mode": "offline", **kw})


# ---------------------------------------------------------------------------------------------
# metrics.jsonl / summary.json


def test_jsonl_rows_round_trip_and_are_flushed_per_row(tmp_path):
    t = Tracker(tmp_path, LoggerConfig(), CONFIG, name="n", group="g", job_type="single")
    t.log(TRAIN_ROWS[0])
    # flushed at once: a crash now would keep this row
    assert read_metrics(tmp_path / "metrics.jsonl") == [TRAIN_ROWS[0]]
    for row in TRAIN_ROWS[1:] + [VAL_ROW, DIAG_ROW]:
        t.log(row)
    t.log({"step": 3, "flops": np.float32(8e9), "train/loss": np.float64(4.25), "level": np.int64(0),
           "diverged": float("nan")})
    t.finish()
    t.finish()  # idempotent
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[:5] == TRAIN_ROWS + [VAL_ROW, DIAG_ROW]
    assert rows[5]["flops"] == 8e9 and rows[5]["train/loss"] == 4.25 and rows[5]["level"] == 0
    assert np.isnan(rows[5]["diverged"])
    assert t.wandb_mode is None and t.wandb_run is None
    with pytest.raises(RuntimeError):
        t.log(TRAIN_ROWS[0])


def test_existing_metrics_are_appended_to_and_a_partial_line_is_closed(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(TRAIN_ROWS[0]) + "\n" + '{"step": 1, "flo')  # killed mid-write
    with Tracker(tmp_path, LoggerConfig(), {}, name="n", group="g", job_type="single") as t:
        t.log(TRAIN_ROWS[2])
    with caplog.at_level(logging.WARNING):
        rows = read_metrics(path)
    assert rows == [TRAIN_ROWS[0], TRAIN_ROWS[2]]
    assert "skipped 1 unreadable line" in caplog.text


def test_a_resumed_tracker_cuts_the_rows_written_after_its_checkpoint(tmp_path):
    rows = [{"step": i, "train/loss": 5.0 - i / 10} for i in range(6)]
    with Tracker(tmp_path, LoggerConfig(), {}, name="n", group="g", job_type="single") as t:
        for row in rows[:3]:
            t.log(row)
        position = t.position()  # saved with a checkpoint
        for row in rows[3:5]:
            t.log(row)  # written, then the run is killed
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "tra')  # killed mid-row
    with Tracker(tmp_path, LoggerConfig(), {}, name="n", group="g", job_type="single", resume=position) as t:
        assert t.rows == 3
        for row in rows[3:]:  # the resumed run writes them again
            t.log(row)
    assert read_metrics(tmp_path / "metrics.jsonl") == rows  # none twice, none missing, nothing broken
    with pytest.raises(ValueError, match="fewer than"):  # a file shorter than at the checkpoint
        Tracker(tmp_path, LoggerConfig(), {}, name="n", group="g", job_type="single",
                resume={"metrics_bytes": 10**6, "metrics_rows": 99})


def test_summary_is_written_atomically_by_replacement(tmp_path):
    t = Tracker(tmp_path, LoggerConfig(), {}, name="n", group="g", job_type="single")
    t.write_summary({"total_flops": 1e12, "delta": None, "label": "default", "n_params": np.int64(7)})
    first = os.stat(tmp_path / "summary.json").st_ino
    t.write_summary({"total_flops": 2e12, "delta": 0.5, "label": "default"})
    t.finish()
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "total_flops": 2e12, "delta": 0.5, "label": "default"}
    assert os.stat(tmp_path / "summary.json").st_ino != first  # a new file replaced the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "summary.json"]  # no temp left


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": float("nan"), "b": {1, 2}} | {"c": object.__new__(_Unjsonable)})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


class _Unjsonable:
    def item(self):
        raise ValueError("boom")

    def tolist(self):
        raise ValueError("boom")


def test_jsonl_logger_never_imports_wandb(tmp_path):
    code = (
        "import sys; from mltrain.config import LoggerConfig; from mltrain.runs.tracking import Tracker\n"
        f"t = Tracker({str(tmp_path)!r}, LoggerConfig(name='jsonl'), {{}}, name='n', group='g', job_type='j')\n"
        "t.log({'step': 0, 'flops': 0.0}); t.write_summary({'a': 1}); t.finish()\n"
        "assert 'wandb' not in sys.modules, 'wandb imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 0, "flops": 0.0}]


# ---------------------------------------------------------------------------------------------
# labels


def test_run_label_drops_seed_and_bookkeeping_and_groups_seeds():
    a = run_label(["seed=1", "multilevel.delta=0.5", "coarsening=evenodd", "logger=wandb",
                   "logger.mode=offline", "hydra/launcher=joblib", "train.progress=false"], "multilevel")
    b = run_label(["coarsening=evenodd", "multilevel.delta=0.5", "seed=2"], "multilevel")
    assert a == b == "coarsening=evenodd,multilevel.delta=0.5"
    assert run_label(["multilevel.delta=0.25", "coarsening=evenodd"], "multilevel") != a
    # single: multilevel.* / coarsening cannot matter, so they are dropped
    assert run_label(["seed=3", "multilevel.delta=0.5", "optim.lr=0.01", "coarsening=none"], "single") == "optim.lr=0.01"
    assert run_label(["seed=3", "multilevel.n_cycles=4"], "single") == "default"
    assert run_label([], "multilevel") == "default"
    # sorted by key, so order does not matter; `+`/`~` prefixes are understood
    assert run_label(["train.max_steps=50", "+experiment=cpu"], "single") == "+experiment=cpu,train.max_steps=50"
    assert run_label(["~logger.tags"], "single") == "default"


def test_run_name_is_readable_and_seeded():
    name = run_name(["seed=1", "multilevel.delta=0.5", "coarsening=evenodd"], "multilevel")
    assert name == "multilevel|coarsening=evenodd,multilevel.delta=0.5|seed=1"
    assert run_name(["optim.lr=0.1"], "single", seed=4) == "single|optim.lr=0.1|seed=4"
    long = run_name([f"model.n_layer={i}" for i in range(40)] + ["seed=0"], "single")
    assert len(long) < 110 and long.endswith("|seed=0")
    other = run_name([f"model.n_layer={i}" for i in range(41)] + ["seed=0"], "single")
    assert other != long  # shortened names stay distinct (hash suffix)


# ---------------------------------------------------------------------------------------------
# real wandb, offline


def test_wandb_offline_run_holds_rows_config_names_and_flops_axis(wandb_env):
    run_dir = wandb_env / "run"
    cfg = _wandb_cfg(tags=["cpu", "test"])
    with Tracker(run_dir, cfg, CONFIG, name="multilevel|x|seed=1", group="coarsening=evenodd",
                 job_type="multilevel") as t:
        assert t.wandb_mode == "offline" and t.wandb_run is not None
        for row in TRAIN_ROWS + [VAL_ROW, DIAG_ROW]:
            t.log(row)
        t.write_summary({"final_val_loss": 4.75, "total_flops": 4e9, "delta": None, "run_kind": "multilevel"})
    assert t.wandb_run is None
    rec = _offline_run(run_dir)
    assert rec["run"].display_name == "multilevel|x|seed=1"
    assert rec["run"].run_group == "coarsening=evenodd"
    assert rec["run"].job_type == "multilevel"
    assert rec["run"].project == "mltrain-test"
    assert list(rec["run"].tags) == ["cpu", "test"]
    assert rec["config"]["model"] == {"n_layer": 4, "n_embd": 128} and rec["config"]["seed"] == 1
    hist = rec["history"]
    assert [h.get("train/loss") for h in hist[:3]] == [5.5, 5.0, 4.5]
    assert [h["flops"] for h in hist] == [0, 2e9, 4e9, 4e9, 4e9]
    assert [h["_step"] for h in hist] == [0, 1, 2, 3, 4]  # W&B's own counter, not our fine step
    assert hist[1]["phase"] == "coarse" and hist[1]["level"] == 1 and hist[1]["step"] == 1
    assert hist[3]["val/loss"] == 4.75 and hist[4]["diag/grad_cosine"] == 0.42
    # every train/, val/ and diag/ key against FLOPs (a new row metric named train/<name> too)
    assert rec["metrics"]["train/*"] == "flops"
    assert rec["metrics"]["val/*"] == "flops"
    assert rec["metrics"]["diag/*"] == "flops"
    assert {"flops", "tokens", "step"} <= set(rec["metrics"])
    assert rec["summary"]["final_val_loss"] == 4.75 and rec["summary"]["run_kind"] == "multilevel"
    assert rec["exit"] is not None and rec["exit"].exit_code == 0
    # metrics.jsonl is written alongside, unchanged
    assert read_metrics(run_dir / "metrics.jsonl") == TRAIN_ROWS + [VAL_ROW, DIAG_ROW]


def test_a_sweep_names_each_wandb_run_by_the_keys_it_varies(wandb_env):
    sweep = wandb_env / "sweep"
    proc = subprocess.run([sys.executable, "-m", "mltrain.cli", "-m", "scale=smoke", "train.progress=false",
                           "coarsening=evenodd", "multilevel.delta=0.1,0.5", "seed=0,1", "optim.lr=0.003",
                           "logger=wandb", "logger.mode=offline", f"hydra.sweep.dir={sweep}"],
                          cwd=wandb_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {}
    for job in sorted(p.parent for p in sweep.glob("*/summary.json")):
        run = _offline_run(job)["run"]
        names[job.name] = (run.display_name, run.run_group)
    assert names["coarsening=evenodd,multilevel.delta=0.5,optim.lr=0.003,scale=smoke,seed=1"] == (
        "multilevel · δ 0.5 · seed 1", "coarsening=evenodd,multilevel.delta=0.5,optim.lr=0.003,scale=smoke")
    assert sorted(n for n, _ in names.values()) == sorted(f"multilevel · δ {d} · seed {s}"
                                                          for d in (0.1, 0.5) for s in (0, 1))


def test_sweep_names_use_hydras_notion_of_a_sweep():
    from mltrain.runs.names import sweep_run_name, swept_keys

    keys = swept_keys(["optim.lr=0.1,0.3", "seed=range(3)", "model.n_embd=64", "x=choice(a,b)", "l=[1,2]"])
    assert keys == ["optim.lr", "seed", "x"]  # a list value is one value, not a sweep
    assert sweep_run_name(["model.n_embd=64", "optim.lr=0.1", "seed=2", "x=a"], keys, "single", 2) == \
        "single · lr 0.1 · x=a · seed 2"


def test_a_resumed_run_continues_the_same_wandb_run_from_its_checkpoint_row(wandb_env):
    run_dir = wandb_env / "run"
    rows = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - i / 10} for i in range(6)]
    with Tracker(run_dir, _wandb_cfg(), CONFIG, name="n", group="g", job_type="single") as t:
        for row in rows[:3]:
            t.log(row)
        position = t.position()
        t.log(rows[3])  # after the checkpoint: the resumed run logs it again
    run_id = (run_dir / "wandb" / "run_id").read_text()
    with Tracker(run_dir, _wandb_cfg(), CONFIG, name="n", group="g", job_type="single", resume=position) as t:
        assert t.wandb_run.id == run_id
        for row in rows[3:]:
            t.log(row)
    first, second = _offline_run(run_dir, 0), _offline_run(run_dir, 1)
    assert first["run"].run_id == second["run"].run_id == run_id  # one W&B run, written in two parts
    # each row under its own row number: W&B keeps the first of a step it already has (rows[3])
    assert [h["_step"] for h in first["history"]] == [0, 1, 2, 3]
    assert [(h["_step"], h["step"]) for h in second["history"]] == [(3, 3), (4, 4), (5, 5)]
    assert read_metrics(run_dir / "metrics.jsonl") == rows


def test_exception_in_with_block_finishes_wandb_run_and_reraises(wandb_env):
    run_dir = wandb_env / "job0"
    with pytest.raises(ZeroDivisionError):
        with Tracker(run_dir, _wandb_cfg(), CONFIG, name="a", group="g", job_type="single") as t:
            t.log(TRAIN_ROWS[0])
            _ = 1 / 0
    import wandb

    assert wandb.run is None
    rec = _offline_run(run_dir)
    assert rec["exit"] is not None and rec["exit"].exit_code == 1
    assert rec["history"][0]["train/loss"] == 5.5
    t.finish()  # idempotent after __exit__
    # a sequential multirun goes on: the next job gets its own W&B run
    with Tracker(wandb_env / "job1", _wandb_cfg(), CONFIG, name="b", group="g", job_type="single") as t2:
        t2.log(TRAIN_ROWS[2])
    rec2 = _offline_run(wandb_env / "job1")
    assert rec2["run"].display_name == "b" and rec2["exit"].exit_code == 0
    assert rec2["run"].run_id != rec["run"].run_id


def test_online_without_api_key_falls_back_to_offline_with_one_warning(wandb_env, caplog, monkeypatch):
    from mltrain.runs import wandb_mirror

    monkeypatch.setattr(wandb_mirror, "_server_problem", lambda wandb: None)  # a server that answers: the key is what is missing
    run_dir = wandb_env / "run"
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mltrain.runs.tracking"):
        with Tracker(run_dir, _wandb_cfg(mode="online"), CONFIG, name="n", group="g", job_type="single") as t:
            assert t.wandb_mode == "offline"
            t.log(TRAIN_ROWS[0])
    assert time.monotonic() - start < 30  # no network here: it must not wait for a server
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "mltrain.runs.tracking"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    msg = warnings[0].getMessage()
    assert "wandb login" in msg and "wandb sync" in msg and "\n" not in msg
    rec = _offline_run(run_dir)
    assert rec["history"][0]["train/loss"] == 5.5 and rec["exit"].exit_code == 0


def test_wandb_error_during_logging_warns_once_and_jsonl_goes_on(wandb_env, caplog):
    run_dir = wandb_env / "run"
    with caplog.at_level(logging.WARNING, logger="mltrain.runs.tracking"):
        with Tracker(run_dir, _wandb_cfg(), CONFIG, name="n", group="g", job_type="single") as t:
            t.log(TRAIN_ROWS[0])
            t.wandb_run.finish()  # the W&B run dies under the tracker: further wandb calls raise
            t.log(TRAIN_ROWS[1])
            t.log(TRAIN_ROWS[2])
            t.write_summary({"final_val_loss": 1.0})
            assert t.wandb_run is None and t.wandb_mode is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "W&B log failed" in warnings[0]
    assert read_metrics(run_dir / "metrics.jsonl") == TRAIN_ROWS
    assert json.loads((run_dir / "summary.json").read_text()) == {"final_val_loss": 1.0}


def test_disabled_mode_writes_no_wandb_files(wandb_env):
    run_dir = wandb_env / "run"
    with Tracker(run_dir, _wandb_cfg(mode="disabled"), CONFIG, name="n", group="g", job_type="single") as t:
        t.log(TRAIN_ROWS[0])
        assert t.wandb_run is None
    assert not (run_dir / "wandb").exists()
    assert read_metrics(run_dir / "metrics.jsonl") == [TRAIN_ROWS[0]]


def test_logger_group_and_run_name_from_config_win(wandb_env):
    run_dir = wandb_env / "run"
    with Tracker(run_dir, _wandb_cfg(group="my-group", run_name="my-name"), {}, name="n", group="g",
                 job_type="single"):
        pass
    rec = _offline_run(run_dir)
    assert rec["run"].run_group == "my-group" and rec["run"].display_name == "my-name"


def test_a_resume_refuses_a_metrics_file_shorter_than_at_its_checkpoint(tmp_path):
    from mltrain.core.errors import ConfigError

    t = Tracker(tmp_path, LoggerConfig(name="jsonl"), {}, name="n", group="g", job_type="single")
    t.log({"step": 1, "flops": 1.0})
    position = t.position()
    t.finish()
    (tmp_path / "metrics.jsonl").write_text("")  # changed since the checkpoint
    with pytest.raises(ConfigError, match="fewer than the .* it had at the last checkpoint"):
        Tracker(tmp_path, LoggerConfig(name="jsonl"), {}, name="n", group="g", job_type="single", resume=position)
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_a_key_wandb_rejects_is_not_called_missing():
    from mltrain.runs.wandb_mirror import _api_key_problem

    class AuthenticationError(Exception):
        pass

    def rejecting(**kwargs):
        raise AuthenticationError("API key must have 40+ characters, has 5.")

    assert "W&B rejected the API key" in _api_key_problem(SimpleNamespace(login=rejecting))
    assert "no W&B API key found" in _api_key_problem(SimpleNamespace(login=lambda **kw: False))
    assert _api_key_problem(SimpleNamespace(login=lambda **kw: True)) is None
