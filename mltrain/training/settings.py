"""The `train` section of the run config: how long and on what a run trains, how it evaluates,
logs, checkpoints and resumes (mltrain/config.py composes it into the schema), and what its
`train.compile` value means. No torch: a config is checked without it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mltrain.core.choice import Choice
from mltrain.core.errors import ConfigError


class DType(Choice):
    auto = "auto"  # bf16 autocast on CUDA, fp32 on CPU
    float32 = "float32"
    bfloat16 = "bfloat16"

class OnNonFinite(Choice):
    """What a non-finite training loss does: `stop` the run (status diverged, the last good checkpoint
    kept) or `skip` the step (no update from that batch; costs one host sync per step)."""

    stop = "stop"
    skip = "skip"


@dataclass
class TrainConfig:
    max_steps: int = 1000  # fine-level optimizer steps
    # Fraction of max_steps this run trains for, its LR schedule ending there: single-level runs at
    # several budgets make the budget frontier mltrain-compare measures savings against (may exceed 1).
    budget: float = 1.0
    batch_size: int = 16  # sequences per optimizer step (split into grad_accum micro-batches)
    grad_accum: int = 1
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    eval_interval: int = 100  # fine steps between held-out evaluations (also at step 0 and at the end)
    # The held-out set: ceil(eval_tokens / model.block_size) sequences of the validation split, evenly spread
    # over it (data/sampler.py `spread`): the same tokens for every run of one data set, block size and
    # eval_tokens, whatever its batch size, seed or number of ranks. (train.eval_batches, which made it
    # eval_batches x batch_size sequences, is gone: naming it is refused in one line.)
    eval_tokens: int = 32768
    # held-out sequences per forward pass, all ranks together; null: the training micro-batch
    # (batch_size / grad_accum). Changes no figure a run records beyond float rounding (bookkeeping).
    eval_batch_size: Optional[int] = None
    log_interval: int = 10  # fine steps between train rows in metrics.jsonl (a phase of its own: its `row_every`)
    dtype: DType = DType.auto
    # torch.compile the model, one graph per depth (mltrain/training/compiling.py): auto (on for CUDA, off on
    # a CPU), true or false. Typed Any so that `auto` and the booleans are all accepted; validate() checks it.
    compile: Any = "auto"
    progress: bool = True  # tqdm progress bar
    # Checkpoints (run_dir/checkpoints/): every checkpoint_interval fine steps, inside other kinds of phase every
    # checkpoint_interval fine steps' worth of FLOPs, and at the end; 0: at the end (and on a signal) only.
    checkpoint_interval: int = 1000
    keep_checkpoints: int = 2  # the newest N checkpoint files are kept
    # Continue the unfinished run in hydra.run.dir (or, with -m, every unfinished job of hydra.sweep.dir)
    # from its last checkpoint; a finished run is left untouched.
    resume: bool = False
    on_nonfinite: OnNonFinite = OnNonFinite.stop
    # FLOP/s of one device for MFU; null: the table's bf16 peak of the card (training/devices.py), none on a CPU
    peak_flops: Optional[float] = None
    prefetch: bool = True  # build and copy the next batch while the step runs (training/batches.py)
    # data parallel: optimizer steps between the ranks' agreeing whether a signal asked to stop (one
    # all-reduce and host read each time; one process checks every step, for free)
    stop_check_interval: int = 20
    # A run that would take more than a day on this machine (its planned FLOPs at a rate no run reaches
    # here, mltrain/runs/sanity.py) is refused before it starts unless this is true.
    allow_long: bool = False


def held_out_sequences(t: "TrainConfig", block_size: int) -> int:
    """Sequences of block_size tokens the held-out set asks for: at least train.eval_tokens tokens."""
    return -(-int(t.eval_tokens) // int(block_size))


def eval_batch_size(t: "TrainConfig") -> int:
    """Held-out sequences per forward pass, all ranks together (train.eval_batch_size, null: the training
    micro-batch)."""
    return int(t.eval_batch_size or max(1, t.batch_size // t.grad_accum))


_COMPILE_VALUES = {"auto": None, "true": True, "false": False}


def compile_setting(value: Any) -> Optional[bool]:
    """train.compile as True, False or None (auto); ConfigError for anything else."""
    if isinstance(value, bool):
        return value
    key = str(value).strip().lower()
    if key not in _COMPILE_VALUES:
        raise ConfigError(f"train.compile={value!r} must be auto, true or false")
    return _COMPILE_VALUES[key]
