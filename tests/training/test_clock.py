"""The run's clock: train_time_s leaves out evaluation and goes with every row; time apart counts once
when nested."""

from __future__ import annotations

import json
import time

from helpers import compose_config, read_rows, typed

from mltrain.run import run
from mltrain.training.evaluation import Evaluator
from mltrain.training.trainer import Clock


def test_train_time_leaves_out_evaluation_and_goes_with_every_row(tmp_path, monkeypatch):
    slow = 0.2
    real = Evaluator.loss

    def slow_loss(self, view):
        time.sleep(slow)
        return real(self, view)

    monkeypatch.setattr(Evaluator, "loss", slow_loss)
    run(typed(compose_config("train.max_steps=4", "train.eval_interval=2")), run_dir=tmp_path / "run")
    rows, s = read_rows(tmp_path / "run"), json.loads((tmp_path / "run" / "summary.json").read_text())
    evals = [r for r in rows if "val/loss" in r]
    assert len(evals) == 3  # steps 0, 2, 4
    assert s["wall_time_s"] - s["train_time_s"] >= len(evals) * slow
    assert all(0 <= r["train_time_s"] <= r["time_s"] for r in rows)
    times = [r["train_time_s"] for r in rows]
    assert times == sorted(times)


def test_the_clock_counts_nested_time_apart_once():
    clock = Clock()
    with clock.apart():
        with clock.apart():
            time.sleep(0.01)
    assert clock.elapsed() - clock.train_time() >= 0.01
    clock.restart(elapsed=100.0, apart=40.0)
    assert clock.elapsed() >= 100.0 and 60.0 <= clock.train_time() < 100.0
