"""Checkpoint cost: milliseconds to write one (torch.save + fsync + atomic rename, as a run does) and to
read it back into a runner, and its size on disk, for the paper's model on CPU.

Two states are measured: single-level SGD after a few steps (weights + momentum), and a multilevel
(evenodd) run stopped inside its first coarse phase, when the fine optimizer and a coarse one hold state.

    python scripts/bench_checkpoint.py                      # gpt22m (22,368,512 parameters)
    python scripts/bench_checkpoint.py model=tiny --repeats 9

The vocabulary is padded to GPT-2's 50257 with the bytes tokenizer, so no tokenizer files are needed
(the shapes, hence the bytes, are those of gpt22m with the GPT-2 tokenizer). Figures are medians over
--repeats writes into one folder (a page cache as warm as a running job's); the spread is printed too,
and the part of a write spent serializing (torch.save into memory) apart from the disk and its fsync.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.config import register_configs, typed
from mltrain.run import build

register_configs()

BASE = ["train.batch_size=2", "train.progress=false", "device=cpu", "train.eval_tokens=128",
        "data.tokenizer=bytes"]


def state_after(overrides: list[str], steps: int):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = typed(compose("config", overrides=[*BASE, *overrides]))
    session = build(cfg, lambda row: None)
    st = session.trainer.state
    session.runner.run(should_stop=lambda: st.steps.get("fine", 0) + st.steps.get("coarse", 0) >= steps)
    return session


def measure(label: str, session, repeats: int) -> None:
    runner = session.runner
    with tempfile.TemporaryDirectory(dir=".") as folder:
        path = Path(folder) / "ckpt.pt"
        writes, reads, serialize = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.save(runner.state_dict(), io.BytesIO())  # the same bytes, into memory: no disk, no fsync
            serialize.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            save_checkpoint(path, runner, {"metrics_bytes": 0, "metrics_rows": 0})
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            load_checkpoint(path, runner)
            reads.append(time.perf_counter() - t0)
        size = path.stat().st_size
    n_params = session.model.num_params()
    ms = lambda xs: f"{statistics.median(xs) * 1e3:.0f} ms (min {min(xs) * 1e3:.0f}, max {max(xs) * 1e3:.0f})"  # noqa: E731
    print(f"{label}: {n_params:,} parameters | {size / 1e6:.1f} MB on disk ({size / (4 * n_params):.2f}x the fp32 "
          f"weights) | write {ms(writes)}, of which serializing in memory {ms(serialize)} | read {ms(reads)}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("overrides", nargs="*", default=["model=gpt22m", "model.vocab_size=50257"])
    args = parser.parse_args(argv)
    print(f"overrides: {' '.join(args.overrides)}; {args.repeats} writes and reads each")
    measure("single level, SGD, after 2 steps", state_after(args.overrides, 2), args.repeats)
    ml = ["coarsening=evenodd", "multilevel.n_cycles=1", "multilevel.coarse_steps=2", "train.max_steps=4"]
    measure("multilevel evenodd, inside the first coarse phase", state_after([*args.overrides, *ml], 3), args.repeats)


if __name__ == "__main__":
    main(sys.argv[1:])
