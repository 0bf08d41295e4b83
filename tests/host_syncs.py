"""Counting tensor -> host conversions in mltrain's own code (`.item()`, `bool()`, `float()`, `int()`,
`.tolist()`, `.cpu()`, `.numpy()` called from a file of the mltrain package): each is a host sync on a GPU.
Used by tests/test_host_syncs.py in one process, and run by it under torchrun (2 gloo processes):

    python -m torch.distributed.run --nproc_per_node=2 tests/host_syncs.py OUT.json

Conversions are attributed to where they happen: inside a row writer (a train row, an evaluation, a
diagnostics row), inside the data-parallel stop check (training/distributed.py all_ranks_agree, every
train.stop_check_interval steps), or in the step itself, where there must be none.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import torch

MLTRAIN = str(Path(__file__).resolve().parents[1] / "mltrain")
CONVERSIONS = ("item", "__bool__", "__float__", "__int__", "tolist", "cpu", "numpy")
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=8",
        "train.eval_batches=1", "train.progress=false", "device=cpu", "train.checkpoint_interval=0",
        "train.log_interval=8", "schedule.warmup_steps=2", "train.stop_check_interval=16"]
METHODS = {
    "single": ["train.max_steps=64"],
    "multilevel": ["train.max_steps=64", "coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=16",
                   "multilevel.coarse_log_interval=8"],
    "stacking": ["train.max_steps=64", "experiment=stacking"],
    "layer_drop": ["train.max_steps=64", "experiment=layer_drop", "layer_drop.gamma=0.1"],
    "raptr": ["train.max_steps=64", "experiment=raptr"],
    "skip": ["train.max_steps=64", "train.on_nonfinite=skip", "optim.fused=true"],  # decided on the device
    "skip, adamw": ["train.max_steps=64", "train.on_nonfinite=skip", "optim=adamw", "optim.fused=true",
                    "coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=16"],
}


class Counter:
    """Patches the conversions of torch.Tensor; counts those called from mltrain's code, by where."""

    def __init__(self) -> None:
        self.where = "step"
        self.counts: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._saved: dict[str, object] = {}

    def _wrap(self, name: str):
        original = getattr(torch.Tensor, name)
        counter = self

        def counted(tensor, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(MLTRAIN):
                counter.counts[counter.where] = counter.counts.get(counter.where, 0) + 1
            return original(tensor, *args, **kwargs)

        return counted

    @contextlib.contextmanager
    def inside(self, where: str):
        self.calls[where] = self.calls.get(where, 0) + 1
        outer, self.where = self.where, where
        try:
            yield
        finally:
            self.where = outer

    def attribute(self, owner, name: str, where: str) -> None:
        """Count conversions inside `owner.name` (a function) as `where`."""
        original = getattr(owner, name)
        counter = self

        def wrapped(*args, **kwargs):
            with counter.inside(where):
                return original(*args, **kwargs)

        self._saved[(owner, name)] = original
        setattr(owner, name, wrapped)

    def __enter__(self) -> "Counter":
        for name in CONVERSIONS:
            self._saved[(torch.Tensor, name)] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._wrap(name))
        from mltrain.training import distributed
        from mltrain.training.diagnostics import Diagnostics
        from mltrain.training.evaluation import Evaluator
        from mltrain.training.trainer import Trainer

        self.attribute(Trainer, "log_train", "train row")
        self.attribute(Evaluator, "log_eval", "eval row")
        self.attribute(Diagnostics, "log_diagnostics", "diag row")
        self.attribute(distributed, "all_ranks_agree", "stop check")
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)


def count(overrides: list[str]) -> dict:
    """Train a run of `overrides` (after its first 16 steps, a warm-up) through the real run loop's hooks;
    the conversions and row writers by where, the optimizer steps counted."""
    from hydra import compose, initialize_config_module

    from mltrain import run as run_module
    from mltrain.config import register_configs
    from mltrain.run import build
    from mltrain.training.checkpoint import CheckpointFolder
    from mltrain.training.resume import StopSignals

    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=[*TINY, *overrides])
    session = build(cfg, lambda row: None)
    runner, state = session.runner, session.trainer.state
    saver = run_module.CheckpointSaver(session, CheckpointFolder(Path(os.environ.get("TMPDIR", "/tmp")), 1), None, {},
                                       0.0)
    stop = run_module._stop_rule(StopSignals(), state, int(cfg.train.stop_check_interval))
    runner.run(should_stop=lambda: state.optimizer_steps >= 16, after_step=saver.after_step)  # warm-up
    warm = state.optimizer_steps
    with Counter() as counter:
        finished = runner.run(should_stop=stop, after_step=saver.after_step)
    return {"finished": finished, "steps": state.optimizer_steps - warm, "conversions": counter.counts,
            "rows": counter.calls}


def main() -> None:
    from mltrain.training import distributed

    out = {name: count(overrides) for name, overrides in METHODS.items() if name in sys.argv[2:] or not sys.argv[2:]}
    if distributed.world_from_env().is_main:
        Path(sys.argv[1]).write_text(json.dumps(out))
    distributed.shutdown()


if __name__ == "__main__":
    main()
