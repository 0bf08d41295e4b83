"""Host syncs of mltrain's training step, per method: none in the step, at most one per row written.

Two counts, each attributed to where it happens: inside a row writer (a train row, an evaluation, a
diagnostics row), inside the data-parallel stop check (training/distributed.py all_ranks_agree, every
train.stop_check_interval steps), or in the step itself, where there must be none:

- conversions: tensor -> host conversions (`.item()`, `bool()`, `float()`, `int()`, `.tolist()`,
  `.cpu()`, `.numpy()`) called from a file of the mltrain package: each is a host sync on a GPU;
- CUDA syncs (on a GPU): every synchronizing CUDA call torch.cuda.set_sync_debug_mode("warn") reports,
  from anywhere (torch's own code too).

Both are counted only over the steps after the method's last new graph (`--compile`, and on a GPU where
train.compile=auto compiles): compiling and autotuning synchronize, and a step that compiles is no steady
step. The JSON says at which step counting began and how many graphs there were; a method that compiles
more graphs than EXPECTED_GRAPHS says it should (one per depth its plan trains and evaluates) fails that
check with the count, and so does one left with fewer than a quarter of --steps to count.

    python scripts/syncs.py OUT.json [--device cuda] [--steps 200] [--compile] [METHOD ...]
    python -m torch.distributed.run --nproc_per_node=2 scripts/syncs.py OUT.json    # data parallel

It exits 1 when a method breaks the bound (tests/training/test_host_syncs.py runs it on the CPU; scripts/gpu_lease.sh
on a GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Optional

import torch

MLTRAIN = str(Path(__file__).resolve().parents[1] / "mltrain")
CONVERSIONS = ("item", "__bool__", "__float__", "__int__", "tolist", "cpu", "numpy")
ROWS = ("train row", "eval row", "diag row")
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=8",
        "train.eval_tokens=128", "train.progress=false", "train.checkpoint_interval=0", "train.log_interval=8",
        "schedule.warmup_steps=2", "train.stop_check_interval=16",
        "train.eval_interval=8"]  # the first evaluation (and its graph) inside the warm-up
WARMUP = 16  # optimizer steps before counting: compiling, the first optimizer steps
METHODS = {
    "single": [],
    "multilevel": ["coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=16",
                   "multilevel.coarse_log_interval=8"],
    "stacking": ["experiment=stacking"],
    "layer_drop": ["experiment=layer_drop", "layer_drop.gamma=0.1"],
    "raptr": ["experiment=raptr"],
    "skip": ["train.on_nonfinite=skip", "optim.fused=true"],  # decided on the device
    "skip, adamw": ["train.on_nonfinite=skip", "optim=adamw", "optim.fused=true", "coarsening=evenodd",
                    "multilevel.n_cycles=2", "multilevel.coarse_steps=16"],
}


# Graphs dynamo makes for each method at TINY's shape with --compile (the graphs are dynamo's: the same for
# every backend and device), counted on the CPU: a train graph per depth the plan trains (layer dropping: per
# kept-block count, at most n_layer + 1), one for evaluation. More means something changes from step to
# step that should not.
EXPECTED_GRAPHS = {"single": 2, "multilevel": 3, "stacking": 4, "layer_drop": 6, "raptr": 4, "skip": 2,
                   "skip, adamw": 3}


def graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class Counter:
    """Patches the conversions of torch.Tensor; counts those called from mltrain's code, by where; and the
    CUDA syncs torch reports in its sync debug mode, by where."""

    def __init__(self) -> None:
        self.where = "step"
        self.counts: dict[str, int] = {}
        self.cuda_syncs: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._saved: dict[tuple, object] = {}
        self._warnings: Optional[warnings.catch_warnings] = None

    def _warned(self, message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message):
            self.cuda_syncs[self.where] = self.cuda_syncs.get(self.where, 0) + 1

    def _wrap(self, name: str):
        original = getattr(torch.Tensor, name)
        counter = self

        def counted(tensor, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(MLTRAIN):
                counter.counts[counter.where] = counter.counts.get(counter.where, 0) + 1
            return original(tensor, *args, **kwargs)

        return counted

    def reset(self) -> None:
        """Forget what was counted so far (a step compiled a new graph: counting starts after it)."""
        self.counts.clear()
        self.cuda_syncs.clear()
        self.calls.clear()

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
        from mltrain.runtime.diagnostics import Diagnostics
        from mltrain.training.evaluation import Evaluator
        from mltrain.training.trainer import Trainer

        self.attribute(Trainer, "log_train", "train row")
        self.attribute(Evaluator, "log_eval", "eval row")
        self.attribute(Diagnostics, "log_diagnostics", "diag row")
        self.attribute(distributed, "all_ranks_agree", "stop check")
        if torch.cuda.is_available():
            self._warnings = warnings.catch_warnings()
            self._warnings.__enter__()
            warnings.simplefilter("always")
            warnings.showwarning = self._warned
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        if self._warnings is not None:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("default")
            self._warnings.__exit__(*exc)
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)


def count(overrides: list[str], steps: int = 48, device: str = "cpu", compile_: bool = False) -> dict:
    """Train a run of `overrides` for WARMUP + `steps` fine steps through the real run loop's hooks,
    counting over the steps after the warm-up and after the last new graph; the conversions, CUDA syncs and
    row writers by where, the step counting began at, the graphs."""
    from hydra import compose, initialize_config_module

    from mltrain import run as run_module
    from mltrain.config import register_configs, typed
    from mltrain.run import build
    from mltrain.training.checkpoint import CheckpointFolder, CheckpointSaver
    from mltrain.training import distributed
    from mltrain.training.resume import StopSignals

    distributed.init(distributed.world_from_env())  # under torchrun: join the group, as run() does first
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = typed(compose("config", overrides=[*TINY, f"device={device}", f"train.max_steps={WARMUP + steps}",
                                                 *(["train.compile=true"] if compile_ else []), *overrides]))
    session = build(cfg, lambda row: None)
    runner, state = session.runner, session.trainer.state
    folder = CheckpointFolder(Path(os.environ.get("TMPDIR", "/tmp")), 1)
    saver = CheckpointSaver(runner, folder, None, {}, 0.0, 0, session.fine_step_flops)
    stop = run_module._stop_rule(StopSignals(), state, int(cfg.train.stop_check_interval))
    start_graphs = graphs()
    runner.run(should_stop=lambda: state.optimizer_steps >= WARMUP, after_step=saver.after_step)
    seen, since = graphs(), state.optimizer_steps
    with Counter() as counter:

        def after_step(kind) -> None:
            nonlocal seen, since
            saver.after_step(kind)
            if graphs() != seen:  # this step compiled: count from the next one
                seen, since = graphs(), state.optimizer_steps
                counter.reset()

        finished = runner.run(should_stop=stop, after_step=after_step)
    return {"finished": finished, "steps": state.optimizer_steps - since, "counting_from_step": since,
            "graphs": seen - start_graphs, "conversions": counter.counts, "cuda_syncs": counter.cuda_syncs,
            "rows": counter.calls, "compiled": session.trainer.compiled}


def problems(name: str, got: dict, stop_every: int, steps: int = 0) -> list[str]:
    """What breaks the bound: a sync in the step, more than one per row, a stop check more often than
    every `stop_every` steps, more graphs than expected, fewer than steps // 4 steps counted; [] when none."""
    out = []
    rows = got["rows"]
    if not got["finished"]:
        out.append(f"{name}: did not finish")
    if got["compiled"] and got["graphs"] > EXPECTED_GRAPHS.get(name, got["graphs"]):
        out.append(f"{name}: {got['graphs']} graphs compiled, {EXPECTED_GRAPHS[name]} expected: it keeps compiling "
                   f"(TORCH_LOGS=recompiles says why)")
    if got["steps"] < steps // 4:
        out.append(f"{name}: only {got['steps']} steps after its last new graph (at step {got['counting_from_step']}) "
                   f"to count, fewer than {steps // 4}")
    for what in ("conversions", "cuda_syncs"):
        counts = got[what]
        if counts.get("step", 0):
            out.append(f"{name}: {counts['step']} {what} in the step itself")
        for where in ROWS:
            if counts.get(where, 0) > rows.get(where, 0):
                out.append(f"{name}: {counts[where]} {what} in {rows.get(where, 0)} {where}s")
        if counts.get("stop check", 0) > 2 * rows.get("stop check", 0):
            out.append(f"{name}: {counts['stop check']} {what} in {rows.get('stop check', 0)} stop checks")
    if rows.get("stop check", 0) > got["steps"] // stop_every + 1:
        out.append(f"{name}: {rows['stop check']} stop checks in {got['steps']} steps (every {stop_every} expected)")
    return out


def main() -> None:
    import argparse

    from mltrain.training import distributed

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the JSON file to write (rank 0)")
    ap.add_argument("methods", nargs="*", help=f"of {', '.join(METHODS)} (default: all)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=48, help="steps per method after the warm-up")
    ap.add_argument("--compile", action="store_true", help="train.compile=true (on a GPU, auto compiles already)")
    args = ap.parse_intermixed_args()
    names = args.methods or list(METHODS)
    out = {name: count(METHODS[name], args.steps, args.device, args.compile) for name in names}
    found = [line for name, got in out.items() for line in problems(name, got, 16, args.steps)]
    world = distributed.world_from_env()
    if world.is_main:
        Path(args.out).write_text(json.dumps({"methods": out, "problems": found}, indent=2))
        for line in found:
            print(f"syncs: {line}", file=sys.stderr)
    if world.distributed:  # the ranks end as mltrain's do (training/distributed.py, "How a rank's process ends"):
        distributed.barrier()  # rank 0 writes while the others are done
        distributed.shutdown()
        distributed.end_process(1 if found else 0)  # os._exit: never Python's teardown with gloo's threads
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
