"""Build the parts from the config, run the plan, write the summary.

    config → validate → data → model → samplers, optimizer, hierarchy → Trainer + MultilevelRunner
           → metrics.jsonl / W&B (Tracker), checkpoints/ → summary.json

A run ends `finished`, `interrupted` (SIGINT, SIGTERM or SIGUSR1: the current step is finished and a
checkpoint written) or `diverged` (a non-finite loss with train.on_nonfinite=stop: the last good
checkpoint is kept); summary.json says which. `train.resume=true` continues from the newest checkpoint.
The run holds its directory (mltrain/runs/rundir.py) until it returns. Under data parallel every rank runs
all of this; rank 0 alone owns the directory and writes into it (mltrain/training/distributed.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from mltrain.training import distributed

from mltrain.runs import rundir
from mltrain.training.checkpoint import Cadence, CheckpointFolder, load_latest
from mltrain.method.coarsening import Hierarchy, build_scheme
from mltrain.config import apply_budget, resuming, validate
from mltrain.data import BatchSampler, load_tokens
from mltrain.training.devices import enable_tf32, resolve_device, resolve_dtype, sweep_placement
from mltrain.errors import ConfigError, StorageError
from mltrain.training.flops import FLOPS_FORMULA, peak_flops, train_flops_per_step
from mltrain.training.memory import check_fits
from mltrain.model import GPT, GPTConfig
from mltrain.method.multilevel import MultilevelRunner, planned_steps, run_kind
from mltrain.training.optim import build_optimizer
from mltrain.runs.provenance import provenance
from mltrain.training.resume import PreviousRun, StopSignals, check_resume, resume_command, say
from mltrain.runs.tracking import Tracker, run_label, run_name
from mltrain.training.trainer import EVAL_SEED, NonFiniteLoss, Trainer
from mltrain.runs.weights import remove_weights, save_weights

log = logging.getLogger("mltrain")

# Offsets that give the diagnostic batches and the coarse phases (and the schedule control's steps)
# their own seeded streams: the fine stream is consumed only by fine steps, so fine step n of every run
# with the same seed (single-level, multilevel, control, any budget) trains on the same batch.
DIAG_SEED_OFFSET = 1_000_003
COARSE_SEED_OFFSET = 2_000_003


class RunInterrupted(Exception):
    """The run stopped on a signal after writing a checkpoint. `exit_code` is 128 + the signal number;
    `hand_on()` passes the signal to the handler it had before (submitit's requeue), if any."""

    def __init__(self, message: str, exit_code: int, hand_on: Callable[[], None] = lambda: None):
        super().__init__(message)
        self.exit_code, self.hand_on = exit_code, hand_on


class RunDiverged(RuntimeError):
    """A non-finite loss stopped the run (train.on_nonfinite=stop); the message names where."""


def model_config(cfg: DictConfig, vocab_size: int) -> GPTConfig:
    """The model's config with the vocabulary resolved from the tokenizer (nothing is allocated)."""
    m = OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)
    if m["vocab_size"] is None:
        m["vocab_size"] = vocab_size
    elif m["vocab_size"] < vocab_size:
        raise ConfigError(
            f"model.vocab_size={m['vocab_size']} is smaller than the tokenizer's vocabulary ({vocab_size})"
        )
    return GPTConfig(**m)


def build_model(cfg: DictConfig, vocab_size: int) -> GPT:
    return GPT(model_config(cfg, vocab_size))


def _overrides() -> list[str]:
    if HydraConfig.initialized():
        return list(HydraConfig.get().overrides.task)
    return []


@dataclass
class Session:
    """Everything a run is made of, built from the config: what `run` drives and a checkpoint captures."""

    cfg: DictConfig
    model: GPT
    trainer: Trainer
    runner: MultilevelRunner
    data_description: str
    data: dict  # what summary.json records about the data (see data_record)

    @property
    def kind(self) -> str:
        return self.runner.kind


def data_record(data) -> dict:
    """The data a run trained and was evaluated on, as summary.json records it: mltrain-compare
    refuses to compare runs whose data or tokenizer differ."""
    return {
        "description": data.description,
        "tokenizer": data.tokenizer,
        "vocab_size": data.vocab_size,
        "train_tokens": int(sum(len(a) for a in data.train)),
        "val_tokens": int(sum(len(a) for a in data.val)),
    }


def build(cfg: DictConfig, log_row: Callable[[dict], None]) -> Session:
    """Data, model, samplers, optimizer, hierarchy, trainer and runner for a validated `cfg`.

    Deterministic in cfg.seed: two sessions built from one config train identically (what resume relies
    on). Resolves model.vocab_size into cfg from the tokenizer."""
    apply_budget(cfg)
    # Cheap before expensive: what needs only the config and the data's size (the samplers refuse a
    # split shorter than one context window; the memory bound) is checked before the device or the
    # model is touched, so an impossible run stops in seconds with one line, not after a huge allocation.
    world = distributed.world_from_env()
    t, ml = cfg.train, cfg.multilevel
    B, T = t.batch_size, cfg.model.block_size
    coarse_B = ml.coarse_batch_size or B
    if problem := distributed.check_divisible(world, t.grad_accum, **{
            "train.batch_size": B, "multilevel.coarse_batch_size": coarse_B}):
        raise ConfigError(problem)
    data = load_tokens(cfg.data)
    ranks = {"rank": world.rank, "world_size": world.size}  # each rank reads its slice of every global batch
    sampler = BatchSampler(data.train, B, T, seed=cfg.seed, **ranks)
    coarse_sampler = BatchSampler(data.train, coarse_B, T, seed=cfg.seed + COARSE_SEED_OFFSET, **ranks)
    diag_sampler = BatchSampler(data.train, B, T, seed=cfg.seed + DIAG_SEED_OFFSET, **ranks)
    val_sampler = BatchSampler(data.val, B, T, seed=EVAL_SEED, split="val", **ranks)
    gpt_config = model_config(cfg, data.vocab_size)

    device = resolve_device(cfg.device, world)
    dtype = resolve_dtype(cfg.train.dtype, device)
    check_fits(gpt_config, cfg.optim, max(B, coarse_B) // world.size // t.grad_accum, device)
    enable_tf32(device)
    distributed.init(world)

    torch.manual_seed(cfg.seed)  # weights and dropout; every numpy draw has its own seeded generator
    model = GPT(gpt_config)
    with open_dict(cfg):
        cfg.model.vocab_size = model.config.vocab_size  # resolved: recorded in W&B and used by the plan
    model.to(device)
    if cfg.train.compile:
        # The whole model, once: dynamo guards on the number of blocks a call runs, not on which
        # modules they are (nn.Module parameters are graph inputs), so every coarse model of one
        # depth reuses one graph, and later cycles compile nothing (checked in tests/test_compile.py).
        model.compile(dynamic=False)

    hierarchy = None
    if run_kind(cfg) != "single":
        c = cfg.coarsening
        hierarchy = Hierarchy(model, build_scheme(c), ml.delta, seed=cfg.seed if c.seed is None else c.seed)
    fine_optimizer = build_optimizer(model.parameters(), cfg.optim, device)
    # MFU only means something against the bf16 peak, i.e. under bf16 autocast.
    peak = peak_flops(device) if dtype == torch.bfloat16 else None
    trainer = Trainer(model, t, device, dtype, val_sampler, log_row, peak_flops=peak, world=world)
    runner = MultilevelRunner(cfg, trainer, hierarchy, fine_optimizer, sampler, coarse_sampler, diag_sampler, device)
    if world.distributed:  # one DDP wrapper for every level: see mltrain/training/distributed.py
        trainer.replica = distributed.wrap(model, runner.coarse_storage(), device)
    trainer.bar.reset(total=planned_steps(runner.plan))
    return Session(cfg, model, trainer, runner, data.description, data_record(data))


def run(cfg: DictConfig, run_dir: Optional[str | Path] = None) -> Optional[float]:
    """Train as `cfg` says; returns the final held-out loss (what a Hydra sweeper would minimise).

    Raises RunInterrupted after a stop on a signal, RunDiverged after a non-finite loss, ConfigError
    for a run dir that cannot be used, each before anything of an earlier run is changed."""
    validate(cfg)
    if run_dir is None:
        run_dir = HydraConfig.get().runtime.output_dir
    run_dir = Path(run_dir)
    world = distributed.world_from_env()
    if not world.distributed:
        sweep_placement()  # a parallel sweep worker takes a GPU of its own, before CUDA starts
    resume = resuming(cfg.train.resume)
    previous = None
    if resume:
        previous = check_resume(run_dir, cfg)  # reads only; another config: ConfigError
        if previous is not None and previous.ended:
            # printed, not logged: the run's own log file stays as it was
            say(f"{previous.describe()}: nothing to resume, left untouched")
            return previous.summary.get("final_val_loss")
    distributed.init(world)
    # The run owns its directory until it returns (a lock, not only a start-up check): a second run
    # into it is refused, never interleaved. Under the CLI, RunGuard has claimed it already. Rank 0
    # alone owns it; the other ranks of a data-parallel job write nothing there.
    with rundir.claim(run_dir, allow_earlier=resume) if world.is_main else contextlib.nullcontext():
        distributed.barrier()  # every rank waits for rank 0's claim before training
        distributed.quiet_other_ranks(world)
        return _run(cfg, run_dir, previous)


def _run(cfg: DictConfig, run_dir: Path, previous: Optional[PreviousRun]) -> Optional[float]:
    world = distributed.world_from_env()
    t, ml = cfg.train, cfg.multilevel
    budget = float(cfg.train.budget)  # build() resolves it into train.max_steps
    # The trainer logs only inside `with tracker` below; the lambda looks the tracker up then. Only
    # rank 0 writes files (metrics, summary, weights, W&B); the other ranks compute the same rows and drop them.
    session = build(cfg, lambda row: tracker.log(row) if tracker is not None else None)
    model, trainer, runner, kind = session.model, session.trainer, session.runner, session.kind
    B, T = t.batch_size, cfg.model.block_size
    device = trainer.device
    fine_step_flops = train_flops_per_step(cfg.model.n_layer, cfg.model.n_embd, model.config.vocab_size, T, B)
    checkpoints = CheckpointFolder(run_dir, keep=t.keep_checkpoints)
    resumed = {}  # the checkpoint's bookkeeping: metrics position, initial val loss, cadence
    if previous is not None:
        found = load_latest(checkpoints, runner)  # another run's: CheckpointError; damaged: the next older
        if found is not None:
            latest, resumed = found
            log.info("resuming %s from %s (fine step %d of %d)", run_dir, latest.name, trainer.state.fine_steps, t.max_steps)
        else:
            resumed = {"metrics_bytes": 0, "metrics_rows": 0}
            log.info("resuming %s: no checkpoint yet, starting again from step 0", run_dir)
        checkpoints.remove_temporaries()
    log.info("data: %s", session.data_description)
    n_params = model.num_params()
    log.info(
        "model: %s parameters (%d blocks, d=%d, %d heads, context %d, vocab %d)",
        f"{n_params:,}", model.config.n_layer, model.config.n_embd, model.config.n_head,
        model.config.block_size, model.config.vocab_size,
    )

    overrides = _overrides()
    origin = provenance(device)
    config_dict = {**OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "provenance": origin}
    tracker = Tracker(run_dir, cfg.logger, config_dict, name=run_name(overrides, kind, seed=cfg.seed),
                      group=run_label(overrides, kind), job_type=kind,
                      resume=resumed if previous is not None else None) if world.is_main else None
    cadence = Cadence(t.checkpoint_interval, fine_step_flops, resumed.get("last_checkpoint_flops", 0.0))
    status, stop_line = "finished", None
    with tracker if tracker is not None else contextlib.nullcontext():
        if "initial_val_loss" in resumed:
            initial_val = resumed["initial_val_loss"]
            trainer.bar.update(trainer.state.optimizer_steps)
        else:
            trainer.t0 = time.perf_counter()  # wall time counts from here, not from data loading
            initial_val = trainer.log_eval(runner.fine)

        saved = [trainer.state.optimizer_steps if resumed.get("initial_val_loss") is not None else -1]

        def save_checkpoint() -> Optional[Path]:
            if trainer.state.optimizer_steps == saved[0]:  # no step since the last one: it is still a valid
                return checkpoints.latest()  # resume point (a restrict or prolong after it is redone)
            trainer.check_finite(weights=True)  # never a checkpoint of a state after a bad step (every rank)
            cadence.mark(trainer.state)
            saved[0] = trainer.state.optimizer_steps
            if tracker is None:  # ranks > 0: rank 0 writes the one checkpoint of the job
                return None
            extra = {"initial_val_loss": initial_val, "last_checkpoint_flops": cadence.last_flops, **tracker.position()}
            return checkpoints.save(runner, extra)

        def after_step(step_kind: str) -> None:
            if cadence.due(step_kind, trainer.state):
                save_checkpoint()

        def should_stop() -> bool:  # under data parallel every rank stops after the same step
            return not distributed.all_ranks_agree(torch.tensor(not signals.requested()))

        model.train()
        signals = StopSignals()
        try:
            with signals:
                completed = runner.run(should_stop=should_stop if world.distributed else signals.requested, after_step=after_step)
                path = save_checkpoint()  # at the end, or where the signal stopped the run
            if not completed:
                status = "interrupted"
                s = trainer.state
                stop_line = (f"stopped by {signals.name} after fine step {s.fine_steps} of {t.max_steps}"
                             f"{_inside(runner)}, checkpoint {path}; resume with: {resume_command(run_dir)}")
        except NonFiniteLoss as err:
            status = "diverged"
            last = checkpoints.latest()
            stop_line = (f"{err}: the run stopped (train.on_nonfinite=stop); "
                         + (f"last good checkpoint: {last}" if last else "no checkpoint was written before it"))
        finally:
            trainer.close()
        wall = trainer.elapsed()
        s = trainer.state
        summary = {
            "status": status,
            "n_params": n_params,
            "total_flops": s.flops,
            "tokens": s.tokens,
            "fine_steps": s.fine_steps,
            "final_train_loss": trainer.last_loss.get("fine"),
            "final_val_loss": trainer.last_loss.get("val"),
            "final_val_loss_se": trainer.last_loss.get("val_se"),
            "initial_val_loss": initial_val,
            "wall_time_s": wall,
            "tokens_per_s": s.tokens / wall,
            "flops_formula": FLOPS_FORMULA,
            "flops_per_fine_step": fine_step_flops,
            "total_flops_blocks": s.flops_blocks,
            "diag_flops": s.diag_flops,
            "eval_flops": s.eval_flops,
            "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
            "data": session.data,
            "held_out": trainer.held_out(),
            "provenance": origin,
            "seed": cfg.seed,
            "budget": budget,
            "run_kind": kind,
            "coarsening": cfg.coarsening.name,
            "delta": ml.delta if kind != "single" else None,
            "label": run_label(overrides, kind),
            "preset": cfg.preset,
            "world_size": world.size,
        }
        if stop_line:
            summary["status_reason"] = stop_line
        if s.skipped_steps:
            summary["skipped_steps"] = s.skipped_steps
        if kind != "single":
            summary.update(
                coarse_steps=s.coarse_steps,
                coarse_flops=s.coarse_flops,
                control_steps=s.control_steps,
                fine_equivalent_steps=s.flops / fine_step_flops,
            )
        if device.type == "cuda":
            summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        if tracker is not None:
            if status == "diverged":
                remove_weights(run_dir)  # those of an earlier stage (before a resume) are not this run's
            else:  # non-finite weights are of no use: the last good checkpoint holds good ones
                try:
                    save_weights(run_dir, model, cfg.data.tokenizer)  # before the summary: a finished run always has them
                except OSError as err:  # full disk: atomic writes leave no partial file; say what is kept
                    raise StorageError(
                        f"cannot write the final weights into {run_dir} ({err.strerror or err}); the run ended and "
                        f"metrics.jsonl keeps all its {tracker.rows:,} rows; no summary.json was written"
                    ) from None
            tracker.write_summary(summary)
            if status != "finished":
                tracker.finish(exit_code=1)  # W&B shows the run failed until a resume finishes it
    if status == "interrupted":
        raise RunInterrupted(stop_line, signals.exit_code, signals.hand_on)
    if status == "diverged":
        raise RunDiverged(stop_line)
    val = summary["final_val_loss"]
    log.info(
        "done: %d fine steps%s | %.3g FLOPs (%.0f fine-step equivalents) | train %.4f | val %.4f (from %.4f) "
        "| %.0f tok/s | %.1f s | %s",
        s.fine_steps,
        f" + {s.coarse_steps} coarse" if s.coarse_steps else (f" + {s.control_steps} control" if s.control_steps else ""),
        s.flops, s.flops / fine_step_flops, _num(summary["final_train_loss"]), _num(val),
        initial_val, summary["tokens_per_s"], wall, run_dir,
    )
    return val


def _inside(runner: MultilevelRunner) -> str:
    """` (in cycle 3's coarse phase of model A, step 40 of 100)` when stopped inside a coarse phase."""
    s = runner.trainer.state
    phase = runner.plan[s.phase_index] if s.phase_index < len(runner.plan) else None
    if phase is None or phase.kind != "train" or not phase.path or not 0 < s.step_in_phase < phase.steps:
        return ""
    model = ".".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] for i in phase.path)
    return (f" (in cycle {phase.cycle}'s {'control' if runner.control else 'coarse'} phase of model {model}, "
            f"step {s.step_in_phase} of {phase.steps})")


def _num(x: Optional[float]) -> float:
    return math.nan if x is None else x
