"""Paired data and what a run records for a fair comparison.

Fine step n of every run with the same seed trains on the same batch, whatever the run does between
fine steps: the coarse phases and the schedule control's steps draw from their own seeded stream."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from hydra import compose, initialize_config_module
from helpers import read_rows, typed

from mltrain import run as run_module
from mltrain.config import register_configs
from mltrain.run import build, run
from mltrain.training.optim import lr_at
from mltrain.training.trainer import Trainer


register_configs()
STEP = Trainer.train_step  # the real one, whatever a test patches

TINY = ["model.n_layer=2", "model.n_embd=16", "model.n_head=2", "model.block_size=8", "train.batch_size=2",
        "train.max_steps=10", "train.eval_interval=5", "train.eval_tokens=32", "train.log_interval=2",
        "train.progress=false", "schedule.warmup_steps=1", "multilevel.n_cycles=3", "multilevel.coarse_steps=3",
        "multilevel.coarse_log_interval=1"]
RUNS = {
    "single": [],
    "multilevel": ["coarsening=evenodd"],
    "schedule_control": ["coarsening=evenodd", "multilevel.control=schedule"],
    "random": ["coarsening=random"],
    "coarse batch 4": ["coarsening=evenodd", "multilevel.coarse_batch_size=4"],
    "budget 0.5": ["train.budget=0.5"],
    "budget 1.5": ["train.budget=1.5"],
}


def compose_cfg(*overrides: str):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        return compose("config", overrides=[*TINY, *overrides])


def batches_by_kind(monkeypatch, *overrides: str) -> dict[str, list[str]]:
    """Run a session and record a digest of every training batch, by step kind (fine/coarse/control)."""
    seen: dict[str, list[str]] = {}

    class Recording:
        def __init__(self, sampler, kind):
            self.sampler, self.kind = sampler, kind

        def next_batch(self):
            x, y = self.sampler.next_batch()
            seen.setdefault(self.kind, []).append(hashlib.sha1(x.numpy().tobytes()).hexdigest())
            return x, y

    monkeypatch.setattr(Trainer, "train_step", lambda self, view, opt, lr, sampler, kind:
                        STEP(self, view, opt, lr, Recording(sampler, kind), kind))
    session = build(typed(compose_cfg(*overrides)), lambda row: None)
    session.runner.run()
    return seen


def test_fine_steps_see_the_same_batches_in_every_run_with_the_same_seed(monkeypatch):
    seen = {name: batches_by_kind(monkeypatch, *extra) for name, extra in RUNS.items()}
    fine = seen["single"]["fine"]
    assert len(fine) == 10 and len(set(fine)) == 10
    for name, batches in seen.items():
        n = len(batches["fine"])
        assert n == {"budget 0.5": 5, "budget 1.5": 15}.get(name, 10)
        assert batches["fine"][:10] == fine[:n], name  # a shorter budget: the same batches, fewer of them
    # the other steps draw from a stream of their own: none of them is a fine batch
    assert len(seen["multilevel"]["coarse"]) == 3 * 2 * 3
    assert len(seen["schedule_control"]["control"]) > 0
    for name in ("multilevel", "random", "coarse batch 4"):
        assert not set(seen[name]["coarse"]) & set(fine), name
    assert not set(seen["schedule_control"]["control"]) & set(fine)
    # ... and it is the same stream for the method and its controls
    assert seen["random"]["coarse"] == seen["multilevel"]["coarse"]
    n = len(seen["schedule_control"]["control"])
    assert seen["schedule_control"]["control"] == seen["multilevel"]["coarse"][:n]


def test_a_budget_ends_the_schedule_and_the_run_early(tmp_path):
    run(typed(compose_cfg("train.budget=0.5", "train.eval_interval=2")), run_dir=tmp_path / "half")
    s = json.loads((tmp_path / "half" / "summary.json").read_text())
    rows = read_rows(tmp_path / "half")
    assert s["budget"] == 0.5 and s["fine_steps"] == 5
    cfg = compose_cfg()
    last_lr = [r["lr"] for r in rows if "lr" in r][-1]
    assert last_lr == pytest.approx(lr_at(4, cfg.schedule, cfg.optim.lr, 5))  # the cosine ends at step 5
    assert last_lr < lr_at(4, cfg.schedule, cfg.optim.lr, 10) / 2
    assert rows[-1]["step"] == 5 and "val/loss" in rows[-1]  # evaluated at its end


def test_another_seed_sees_other_batches(monkeypatch):
    a = batches_by_kind(monkeypatch)["fine"]
    b = batches_by_kind(monkeypatch, "seed=1")["fine"]
    assert not set(a) & set(b)


def test_summary_records_provenance_data_held_out_set_and_uncounted_costs(tmp_path, monkeypatch):
    configs = []

    class Capturing(run_module.Tracker):
        def __init__(self, run_dir, logger_cfg, config, **kw):
            configs.append(config)
            super().__init__(run_dir, logger_cfg, config, **kw)

    monkeypatch.setattr(run_module, "Tracker", Capturing)
    run(typed(compose_cfg()), run_dir=tmp_path / "single")
    run(typed(compose_cfg("coarsening=evenodd", "seed=3")), run_dir=tmp_path / "ml")
    single, ml = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("single", "ml"))

    p = single["provenance"]
    assert p["torch_version"] and p["mltrain_version"] == "0.1.0" and p["python_version"]
    assert "cuda_version" in p and p["device_name"].startswith("cpu")
    assert p["command"]  # the command line of this process (pytest here)
    if p["git"] is not None:  # a git checkout (this repository), not an installed wheel
        assert re.fullmatch(r"[0-9a-f]{40}", p["git"]["commit"]) and isinstance(p["git"]["dirty"], bool)
    assert all(c["provenance"] == s["provenance"] for c, s in zip(configs, (single, ml)))  # W&B config

    assert single["data"]["tokenizer"] == "bytes" and single["data"]["val_tokens"] > 0
    assert single["data"] == ml["data"]
    # the same held-out sequences for every run and seed, and their size
    assert single["held_out"] == ml["held_out"]
    assert single["held_out"]["sequences"] == 2 * 2 and single["held_out"]["tokens"] == 2 * 2 * 8
    assert 0 < single["final_val_loss_se"] < 1

    rows = read_rows(tmp_path / "ml")
    evals = [r for r in rows if "val/loss" in r]
    assert evals and all(r["val/loss_se"] > 0 for r in evals)
    assert all("flops_blocks" in r for r in rows)
    # blocks only: a 1-block coarse step of the 2-block model costs half a fine step
    fine_step = single["flops_per_fine_step"]
    assert single["total_flops_blocks"] == pytest.approx(single["total_flops"])
    assert ml["total_flops_blocks"] == pytest.approx(10 * fine_step + ml["coarse_steps"] * fine_step / 2)
    assert ml["total_flops_blocks"] < ml["total_flops"]
    # the diagnostics (coarse + fine gradient, one batch per coarse model per cycle) and evaluation are
    # counted apart, never on the FLOPs axis
    assert ml["diag_flops"] > 0 and single["diag_flops"] == 0
    assert single["eval_flops"] > 0
    assert rows[-1]["flops"] == ml["total_flops"]
