"""Add a depth method with a new kind of phase, and run it on a tiny model (CPU, seconds).

The method (torch-free) says what its plan is; the handler (torch) says what its new kind of phase does;
the runner executes the plan as its phases say and knows neither by name. Run it: python add_method.py
"""

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from mltrain.config import register_configs, typed
from mltrain.method.plan import Phase, TrainPhase
from mltrain.method.registry import DepthMethod, register_method
from mltrain.run import run
from mltrain.training.runner import phase_handler


# 1. A kind of phase of our own: a Phase subclass (a frozen dataclass) with the fields it needs (every
# phase has its kind, its cycle and `reset_fine_optimizer`; a train phase is a TrainPhase).
@dataclass(frozen=True)
class RedrawBlock(Phase):
    block: int = 0  # the block whose weights are drawn again


# 2. The method: its name (the run kind, and `depth_method=<name>`) and its plan for `total_steps` fine steps.
@register_method
class RedrawLast(DepthMethod):
    """The fine model for half the run, its last block drawn afresh, then the fine model again."""

    name = "redraw_last"

    def plan(self, total_steps):
        half = total_steps // 2
        return [
            TrainPhase(steps=half),  # fine steps: the fine optimizer, LR schedule and batches
            # the new phase; `reset_fine_optimizer` clears the fine optimizer's state after it
            RedrawBlock("redraw", block=self.cfg.model.n_layer - 1, reset_fine_optimizer=True),
            TrainPhase(steps=total_steps - half, columns=(("redrawn", True),)),  # a column on its rows
        ]


# 3. The handler of the new kind: torch code, given a narrow context (the model, the fine optimizer, emit,
# the step, the seed: training/runner.py PhaseContext) and the phase.
@phase_handler("redraw")
def redraw(ctx, phase):
    torch.manual_seed(ctx.seed)  # the same weights in every run with this seed, and after a resume
    ctx.model.blocks[phase.block].apply(ctx.model.init_weights)
    ctx.emit({"step": ctx.step, "redrawn_block": phase.block})
    return True  # False would mean: stopped inside the phase


# 4. Run it as `mltrain depth_method=redraw_last` would, at a tiny size.
register_configs()  # depth_method= now takes redraw_last
tiny = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=16", "train.eval_interval=8", "train.eval_tokens=64", "train.log_interval=4",
        "train.progress=false", "device=cpu"]
with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
    cfg = compose("config", overrides=["depth_method=redraw_last", *tiny])
with tempfile.TemporaryDirectory() as tmp:
    run_dir = Path(tmp) / "run"
    run(typed(cfg), run_dir=run_dir)  # the composed config typed once, as the CLI does
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
assert summary["run_kind"] == "redraw_last" and summary["status"] == "finished"
assert [r["step"] for r in rows if "redrawn_block" in r] == [8]
assert all(r.get("redrawn", False) == (r["step"] > 8) for r in rows if "train/loss" in r)
print(f"redraw_last: final val loss {summary['final_val_loss']:.3f} after {summary['fine_steps']} fine steps")
