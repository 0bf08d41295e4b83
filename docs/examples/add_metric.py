"""Add a per-row metric: one entry in one dict, and every train row carries it.

A train row's metrics are the entries of `mltrain.training.rows.ROW_METRICS`: each is a function of one
optimizer step (`Step`: its loss, the gradients' norm before clipping, the view it trained, the batch,
the LR, the step kind) that returns a number or a device scalar, and the row carries its mean over the
row's steps. Nothing else is edited: `Trainer.train_step` computes it, the steps since the last row keep
its sum on the device (read in the row's one host sync), a checkpoint keeps that sum so a resumed run
writes the same rows, metrics.jsonl and W&B get the key as named (W&B plots `train/*` keys against
FLOPs), and mltrain-compare reads rows as they are.

For a metric of mltrain itself, add the entry to ROW_METRICS in mltrain/training/rows.py. From your own
code, `@row_metric` registers it before the run starts, as below; this runs a tiny run and prints the
new column:

    python docs/examples/add_metric.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from mltrain.config import register_configs, typed
from mltrain.run import run
from mltrain.training.rows import Step, row_metric

TINY = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=8", "train.log_interval=4", "train.eval_interval=8", "train.eval_tokens=64",
        "train.progress=false", "schedule.warmup_steps=1", "train.grad_clip=1.0"]


@row_metric("train/grad_norm")
def grad_norm(step: Step) -> torch.Tensor:
    """The gradients' global norm before clipping, a device scalar: the step reads nothing on the host.
    (train.grad_clip > 0: the step computes the norm to clip with.)"""
    return step.grad_norm


def main() -> None:
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=TINY)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run(typed(cfg), run_dir)  # the composed config typed once, as the CLI does
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in rows if "train/loss" in row]
    assert train_rows and all("train/grad_norm" in row for row in train_rows), "the new key is missing"
    for row in train_rows:
        print(f"step {row['step']}: train/loss {row['train/loss']:.3f}, train/grad_norm {row['train/grad_norm']:.3f}")


if __name__ == "__main__":
    main()
