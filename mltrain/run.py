"""Build the parts from the config, run the plan, write the summary.

    config → preflight (validate, the resume check) → data → model → the fine batches, Trainer, Evaluator,
           the depth method's parts (its build hook), optimizer, PlanRunner (training/) → metrics.jsonl / W&B (Tracker),
             checkpoints/ (training/checkpoint.py CheckpointSaver) → summary.json, the weights

`run` reads as the run does: claim the dir, build, restore, open the tracker, train, summarize, write
the results.
A run ends `finished`, `interrupted` (SIGINT, SIGTERM, SIGUSR1 or SIGHUP: the current step is finished and a
checkpoint written) or `diverged` (a non-finite loss with train.on_nonfinite=stop: the last good
checkpoint is kept); summary.json says which. `train.resume=true` continues from the newest checkpoint.
The run holds its directory (mltrain/runs/rundir.py) until it returns. Under data parallel every rank runs
all of this; rank 0 alone owns the directory and writes into it (mltrain/training/distributed.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from mltrain.config import Config, resuming
from mltrain.data import BatchSampler, load_tokens
from mltrain.core.errors import ConfigError, StorageError
from mltrain.core.flops import FLOPS_FORMULA, train_flops_per_step
from mltrain.model.memory import check_fits
from mltrain.method.cost import plan_cost
from mltrain.method.kinds import RunKind, StepKind
from mltrain.method.plan import planned_steps, where_stopped
from mltrain.method.registry import method_for
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.model.settings import model_config, resolved_vocab
from mltrain.core.plain import plain
from mltrain.preflight import Checked, preflight
from mltrain.runs import rundir
from mltrain.runs.keys import config_digest
from mltrain.runs.names import run_label, run_name, sweep_run_name, swept_keys
from mltrain.runs import environment
from mltrain.runs.provenance import provenance
from mltrain.runs.tracking import Tracker
from mltrain.runs.weights import remove_weights, save_weights
from mltrain.training import distributed
from mltrain.training.batches import DeviceBatches
from mltrain.training.checkpoint import CheckpointFolder, CheckpointSaver, load_latest
from mltrain.training.compiling import compile_model, compile_options, compiles
from mltrain.training.devices import enable_tf32, peak_flops, resolve_device, resolve_dtype, sweep_placement
from mltrain.training.evaluation import Evaluator
from mltrain.training.optim import build_optimizer
from mltrain.training.resume import StopSignals, resume_command, say
from mltrain.training.rows import NonFiniteLoss
from mltrain.training.parts import BuildKit, Parts
from mltrain.training.runner import PlanRunner
from mltrain.training.settings import eval_batch_size, held_out_sequences
from mltrain.training.trainer import Trainer, TrainState

log = logging.getLogger("mltrain")

class RunInterrupted(Exception):
    """The run stopped on a signal after writing a checkpoint. `exit_code` is 128 + the signal number;
    `hand_on()` passes the signal to the handler it had before (submitit's requeue), if any."""

    def __init__(self, message: str, exit_code: int, hand_on: Callable[[], None] = lambda: None):
        super().__init__(message)
        self.exit_code, self.hand_on = exit_code, hand_on


class RunDiverged(RuntimeError):
    """A non-finite loss stopped the run (train.on_nonfinite=stop); the message names where."""


def _overrides() -> list[str]:
    if HydraConfig.initialized():
        return list(HydraConfig.get().overrides.task)
    return []


def _swept_keys() -> Optional[list[str]]:
    """In a Hydra multirun, the keys its sweep varies (read from the sweep's multirun.yaml, which Hydra
    writes before any job starts); None outside a multirun, or when that file cannot be read."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    path = Path(HydraConfig.get().sweep.dir) / "multirun.yaml"
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _SWEPT:  # the same file for every job of the sweep: read once
            _SWEPT.clear()
            _SWEPT[key] = swept_keys(OmegaConf.load(path).hydra.overrides.task)
        return list(_SWEPT[key])
    except Exception:  # noqa: BLE001 - only the W&B display name depends on it: fall back to the long one
        return None


_SWEPT: dict[tuple, list[str]] = {}  # _swept_keys: the keys of the multirun.yaml read last


def tracker_name(overrides: list[str], run_kind: str, seed: int) -> str:
    """The W&B run name: in a sweep, by the keys the sweep varies; else by all the run's overrides."""
    swept = _swept_keys()
    if swept is None:
        return run_name(overrides, run_kind, seed=seed)
    return sweep_run_name(overrides, swept, run_kind, seed)


# ---------------------------------------------------------------------------------------------
# Building a run


@dataclass
class Session:
    """Everything a run is made of, built from the config: what `run` drives and a checkpoint captures."""

    cfg: Config  # model.vocab_size resolved from the tokenizer
    model: GPT
    trainer: Trainer
    evaluator: Evaluator
    runner: PlanRunner
    data_description: str
    data: dict  # what summary.json records about the data (see data_record)

    @property
    def kind(self) -> RunKind:
        return self.runner.kind

    @property
    def fine_step_flops(self) -> float:
        c = self.model.config
        return train_flops_per_step(c.n_layer, c.n_embd, resolved_vocab(c), c.block_size, self.cfg.train.batch_size)


def data_record(data) -> dict:
    """The data a run trained and was evaluated on, as summary.json records it: mltrain-compare
    refuses to compare runs whose data or tokenizer differ."""
    return {
        "description": data.description,
        "tokenizer": data.tokenizer,
        "vocab_size": data.vocab_size,
        "train_tokens": int(sum(len(a) for a in data.train)),
        "val_tokens": int(sum(len(a) for a in data.val)),
        "corpus": getattr(data, "corpus", None) or None,
    }


def build(cfg: Config, emit: Callable[[dict], None]) -> Session:
    """Data, model, the fine batch stream, trainer, evaluator, the depth method's own parts (its build
    hook: training/parts.py), optimizer and runner for a validated `cfg`; every metrics row goes to `emit`.

    Deterministic in cfg.seed: two sessions built from one config train identically (what resume relies
    on). The session's config is `cfg` with model.vocab_size resolved from the tokenizer (a copy: `cfg`
    itself is left as it is)."""
    # Cheap before expensive: what needs only the config and the data's size (the samplers refuse a
    # split shorter than one context window; the memory bound) is checked before the device or the
    # model is touched, so an impossible run stops in seconds with one line, not after a huge allocation.
    world, method = distributed.world_from_env(), method_for(cfg)
    t = cfg.train
    batch_sizes = {"train.batch_size": t.batch_size, **method.batch_sizes()}  # every stream's, by its key
    if problem := distributed.check_divisible(world, t.grad_accum, **batch_sizes):
        raise ConfigError(problem)
    data = load_tokens(cfg.data)
    # each rank reads its slice; every batch's ids are checked against the vocabulary (data/inputs.py)
    T = cfg.model.block_size
    shared: dict[str, Any] = {"rank": world.rank, "world_size": world.size, "vocab_size": data.vocab_size}
    fine = BatchSampler(data.train, t.batch_size, T, seed=cfg.seed, **shared)
    # the held-out set: fixed sequences of the validation split, whatever the batch, seed or ranks
    val = BatchSampler(data.val, 1, T, seed=0, split="val", vocab_size=data.vocab_size)
    held_out = val.spread(held_out_sequences(t, T))
    gpt_config = model_config(cfg.model, data.vocab_size)
    cfg = dataclasses.replace(cfg, model=gpt_config)  # resolved: recorded in W&B and used by the plan

    device = resolve_device(cfg.device, world)
    dtype = resolve_dtype(t.dtype, device)
    check_fits(gpt_config, cfg.optim, max(batch_sizes.values()) // world.size // t.grad_accum, device)
    check_duration(cfg, device, world)  # said first when long; refused beyond a day without consent
    enable_tf32(device)  # the process group is joined already (run, or prepare_launch under the CLI)
    compiled = compiles(t.compile, device)
    model = _model(cfg.seed, gpt_config, device, compiled)
    # MFU only means something against the bf16 peak, i.e. under bf16 autocast (or a peak given for the run)
    peak = peak_flops(device, t.peak_flops) if dtype == torch.bfloat16 or t.peak_flops else None
    trainer = Trainer(model, t, device, dtype, emit, peak_flops=peak, world=world, compiled=compiled)
    evaluator = Evaluator(trainer, held_out, eval_batch_size(t), val.arrays)
    # the training steps' batches come prefetched, on the device (training/batches.py); a stream of the
    # method's own has a seed of its own, so fine step n of every run with one seed trains on one batch
    sampler = lambda size, seed: BatchSampler(data.train, size, T, seed=seed, **shared)  # noqa: E731
    kit = BuildKit(cfg, model, trainer, device, stream=lambda size, seed: DeviceBatches(sampler(size, seed), device,
                                                                                         t.prefetch), sampler=sampler)
    parts = method.build(kit) or Parts(kit)
    fine_optimizer = build_optimizer(model.parameters(), cfg.optim, device)
    runner = PlanRunner(cfg, trainer, evaluator, parts, fine_optimizer, DeviceBatches(fine, device, t.prefetch), device)
    if world.distributed:  # one DDP wrapper for every level: see mltrain/training/distributed.py
        replica = distributed.wrap(model, runner.storage(), device)
        # compiled as a whole, so dynamo's DDP optimizer overlaps the bucket all-reduces with the backward
        trainer.attach_replica(replica, torch.compile(replica, **compile_options()) if compiled else replica)
    trainer.bar.reset(total=planned_steps(runner.plan))
    return Session(cfg, model, trainer, evaluator, runner, data.description, data_record(data))


def check_duration(cfg: Config, device: torch.device, world=None) -> None:
    """How long the run takes at least on this machine (mltrain/runs/sanity.py): one line before its
    first step when that is more than an hour; ConfigError when it is more than a day, unless
    train.allow_long=true. Every phase of the plan counted (mltrain/method/cost.py), at a nominal rate;
    `cfg` has its model.vocab_size resolved."""
    from mltrain.runs import sanity

    world = world or distributed.world_from_env()
    cost = plan_cost(cfg, cfg.model.vocab_size)
    if device.type == "cpu":
        threads = torch.get_num_threads() * world.size
        where, flop_rate = f"cpu ({threads} thread{'s' if threads > 1 else ''})", sanity.rate("cpu", threads)
    else:
        where = f"{world.size} {device.type.upper()} device{'s' if world.size > 1 else ''}"
        flop_rate = world.size * sanity.rate(device.type, peak=peak_flops(device))
    line = sanity.duration_check("this run", cost.total, flop_rate, where, "train.allow_long",
                                 cfg.train.allow_long, steps=cost.steps)
    if line and world.is_main:
        log.info("%s", line)


def _model(seed: int, gpt_config: GPTConfig, device: torch.device, compiled: bool) -> GPT:
    """The fine model, seeded, on `device`, compiled when `compiled` (train.compile resolved for the
    device)."""
    torch.manual_seed(seed)  # weights and dropout; every numpy draw has its own seeded generator
    model = GPT(gpt_config)
    model.to(device)
    if compiled:
        # The whole model, once: dynamo guards on the number of blocks a call runs, not on which
        # modules they are (nn.Module parameters are graph inputs), so every view of one depth
        # reuses one graph, and later cycles compile nothing (checked in tests/e2e/test_compile_once.py).
        compile_model(model, gpt_config.n_layer)
    return model


# ---------------------------------------------------------------------------------------------
# A run, start to end


def run(cfg: Config, run_dir: Optional[str | Path] = None, checked: Optional[Checked] = None) -> Optional[float]:
    """Train as the typed `cfg` says; returns the final held-out loss (what a Hydra sweeper would minimise).
    `checked`: what `preflight` found for this config and dir already (the CLI checks before Hydra
    writes into it); None: check here.

    Reads as the run does: claim the dir, build, restore (an unfinished run to continue), open the
    tracker, train the plan, summarize, write the results. The tracker opens only after everything that
    can refuse the run (the data, the memory bound, the checkpoint) has passed, so a refused start
    leaves the dir as it was. What must end however the run does is a `with` block, not a call.

    Raises RunInterrupted after a stop on a signal, RunDiverged after a non-finite loss, ConfigError
    for a run dir that cannot be used, each before anything of an earlier run is changed."""
    run_dir = Path(HydraConfig.get().runtime.output_dir if run_dir is None else run_dir)
    previous = (checked or preflight(cfg, run_dir)).previous
    world = distributed.world_from_env()
    if not world.distributed:
        sweep_placement()  # a parallel sweep worker takes a GPU of its own, before CUDA starts
    if previous is not None and previous.ended:
        # printed, not logged: the run's own log file stays as it was
        say(f"{previous.describe()}: nothing to resume, left untouched")
        return previous.summary.get("final_val_loss")
    if previous is not None:  # made elsewhere (another torch, code, ...): refused before anything is written
        environment.check_resume(previous.summary, run_dir, torch.get_num_threads())
    distributed.init(world)
    with _claimed(run_dir, world, resuming(cfg.train.resume)):
        rows = RowSink()  # the trainer's `emit` from its construction on; the tracker is opened into it
        session = build(cfg, rows)
        cfg = session.cfg
        trainer, runner = session.trainer, session.runner
        checkpoints = CheckpointFolder(run_dir, keep=cfg.train.keep_checkpoints)
        resumed = restore(session, checkpoints, run_dir) if previous is not None else {}
        describe(session)
        origin = provenance(trainer.device)
        where = environment.capture(trainer.device)  # what a continuation must equal, and the load now
        record = run_record(session, _overrides())
        # Only rank 0 writes files (metrics, summary, weights, W&B); the other ranks compute the same rows
        # and drop them.
        tracker = open_tracker(session, run_dir, record, origin, resumed) if world.is_main else None
        with tracker if tracker is not None else contextlib.nullcontext():
            rows.open(tracker.log if tracker is not None else _drop)
            outcome = Outcome("finished", _initial_val_loss(session, resumed), StopSignals())
            saver = CheckpointSaver(runner, checkpoints, tracker, resumed, outcome.initial_val,
                                    cfg.train.checkpoint_interval, session.fine_step_flops)
            # The plan from where the run stands to its end, checkpointed on its cadence; a signal stops it
            # after the current step (with a checkpoint), a non-finite loss (train.on_nonfinite=stop) too.
            # The signals stay caught until the results are written: one that comes after the last step
            # (the final checkpoint, the summary) is honoured by `conclude`, not lost, nor a half-written run.
            with outcome.signals:
                with _training(session, outcome, checkpoints):
                    stop = _stop_rule(outcome.signals, trainer.state, cfg.train.stop_check_interval)
                    completed = runner.run(should_stop=stop, after_step=saver.after_step)
                    path = saver.save()  # at the end, or where the signal stopped the run
                    if not completed:
                        outcome.interrupted(runner, path, run_dir)
                summary = summarize(session, outcome, record, origin)
                summary["environment"] = environment.ended(where)
                if tracker is not None:
                    write_results(session, tracker, summary, run_dir)
        return conclude(session, outcome, summary, run_dir)


@contextlib.contextmanager
def _claimed(run_dir: Path, world: distributed.World, resume: bool) -> Iterator[None]:
    """The run owns its directory while inside (a lock, not only a start-up check): a second run into it
    is refused, never interleaved. Under the CLI, RunGuard has claimed it already. Rank 0 alone owns
    it; the other ranks of a data-parallel job write nothing there."""
    with rundir.claim(run_dir, allow_earlier=resume) if world.is_main else contextlib.nullcontext():
        distributed.barrier()  # every rank waits for rank 0's claim before training
        distributed.quiet_other_ranks(world)
        yield


@dataclass
class Outcome:
    """How the training loop ended: finished, interrupted (by `signals`) or diverged, and why."""

    status: str
    initial_val: float
    signals: StopSignals
    stop_line: Optional[str] = None

    def interrupted(self, runner: PlanRunner, checkpoint: Optional[Path], run_dir: Path) -> None:
        s = runner.trainer.state
        self.status = "interrupted"
        self.stop_line = (f"stopped by {self.signals.name} after fine step {s.fine_steps} of "
                          f"{runner.last_fine_step}{_inside(runner)}, checkpoint {checkpoint}; resume with: "
                          f"{resume_command(run_dir)}")


@contextlib.contextmanager
def _training(session: Session, outcome: Outcome, checkpoints: CheckpointFolder) -> Iterator[None]:
    """While the plan trains: the model in training mode; a non-finite loss (train.on_nonfinite=stop) ends
    the block with `outcome` diverged, naming the last good checkpoint; the progress bar is closed however
    it ends."""
    session.model.train()
    try:
        yield
    except NonFiniteLoss as err:
        last = checkpoints.latest()
        outcome.status = "diverged"
        outcome.stop_line = (f"{err}: the run stopped (train.on_nonfinite=stop); "
                             + (f"last good checkpoint: {last}" if last else "no checkpoint was written before it"))
    finally:
        session.trainer.close()


class RowSink:
    """Where a run's metrics rows go, given to the trainer (and through it to the evaluator and the
    measurers) when it is built: the tracker's `log` once `open`ed (rank 0), nothing on other ranks. The
    tracker opens only after everything that can refuse the run has passed, so a row before it is a bug."""

    def __init__(self) -> None:
        self._write: Optional[Callable[[dict], None]] = None

    def open(self, write: Callable[[dict], None]) -> None:
        """Rows go to `write` from now on: once, when the tracker opens (or, on ranks > 0, to nothing)."""
        if self._write is not None:
            raise RuntimeError("a run's rows are opened into one tracker, once")
        self._write = write

    def __call__(self, row: dict) -> None:
        if self._write is None:
            raise RuntimeError("a metrics row before the tracker was opened")
        self._write(row)


def _drop(row: dict) -> None:
    """Ranks > 0 compute every row and write none: rank 0 writes the job's files."""


def restore(session: Session, checkpoints: CheckpointFolder, run_dir: Path) -> dict:
    """An unfinished run's newest checkpoint, loaded into `session`; returns its bookkeeping (metrics
    position, initial val loss, checkpoint cadence). Another run's: CheckpointError, before anything is
    changed; a damaged one: the next older (training/checkpoint.py load_latest)."""
    found = load_latest(checkpoints, session.runner)
    if found is not None:
        latest, resumed = found
        log.info("resuming %s from %s (fine step %d of %d)", run_dir, latest.name, session.trainer.state.fine_steps,
                 session.runner.last_fine_step)
    else:
        resumed = {"metrics_bytes": 0, "metrics_rows": 0}
        log.info("resuming %s: no checkpoint yet, starting again from step 0", run_dir)
    checkpoints.remove_temporaries()
    return resumed


def describe(session: Session) -> None:
    """The data and model lines at the head of a run's log."""
    c = session.model.config
    log.info("data: %s", session.data_description)
    log.info("model: %s parameters (%d blocks, d=%d, %d heads, context %d, vocab %d)",
             f"{session.model.num_params():,}", c.n_layer, c.n_embd, c.n_head, c.block_size, c.vocab_size)


def run_record(session: Session, overrides: list[str]) -> dict:
    """What the run is (runs/files.py RUN_RECORD_FIELDS): run.json at the start, repeated in summary.json."""
    cfg, kind = session.cfg, session.kind
    return {"run_kind": kind.value, "label": run_label(overrides, kind), "seed": cfg.seed,
            "budget": float(cfg.train.budget), "budget_steps": session.runner.last_fine_step, "preset": cfg.preset,
            "config_digest": config_digest(plain(cfg))}


def open_tracker(session: Session, run_dir: Path, record: dict, origin: dict, resumed: dict) -> Tracker:
    """metrics.jsonl (cut back to the checkpoint's position when resuming), run.json, and W&B with the
    config as the run was given it (plus its provenance)."""
    cfg = session.cfg
    config = {**plain(cfg), "provenance": origin}
    return Tracker(run_dir, cfg.logger, config, name=tracker_name(_overrides(), record["run_kind"], cfg.seed),
                   group=record["label"], job_type=cfg.logger.job_type or record["run_kind"], resume=resumed or None,
                   record=record)


# ---------------------------------------------------------------------------------------------
# The training loop


def _initial_val_loss(session: Session, resumed: dict) -> float:
    """The held-out loss before the first step; a resumed run has it from its checkpoint. The run's
    clock starts here, not at data loading."""
    trainer = session.trainer
    if "initial_val_loss" in resumed:
        trainer.bar.update(trainer.state.optimizer_steps)
        return resumed["initial_val_loss"]
    trainer.clock.restart()
    return session.evaluator.log_eval(session.runner.fine)


def _stop_rule(signals: StopSignals, state: Optional[TrainState] = None, every: int = 1) -> Callable[[], bool]:
    """Whether to stop after this step: a signal was received. Under data parallel, by any rank, agreed
    every `every` optimizer steps of `state` (train.stop_check_interval: each agreement is an all-reduce and
    a host read), so that every rank stops after the same step."""
    if not distributed.world_from_env().distributed:
        return signals.requested

    def agreed() -> bool:
        if state is not None and state.optimizer_steps % every:
            return False
        return not distributed.all_ranks_agree(torch.tensor(not signals.requested()))

    return agreed


# ---------------------------------------------------------------------------------------------
# The end of a run: summary.json, the weights, the last line


def summarize(session: Session, outcome: Outcome, record: dict, origin: dict) -> dict:
    """summary.json: what the run is (run.json's fields), how it ended, what it cost, where it ran.
    `wall_time_s` counts from the initial evaluation on; `train_time_s` is the part spent training (held-out
    evaluation, diagnostics and checkpoints left out), the figure a wall-clock comparison uses."""
    trainer, s = session.trainer, session.trainer.state
    device, wall = trainer.device, trainer.clock.elapsed()
    summary = {
        **record,
        "status": outcome.status,
        "n_params": session.model.num_params(),
        "total_flops": s.flops,
        "tokens": s.tokens,
        "epochs": epochs(s.tokens, session.data),
        "fine_steps": s.fine_steps,
        "final_train_loss": trainer.last_loss.get(StepKind.fine.value),
        "final_val_loss": trainer.last_loss.get("val"),
        "final_val_loss_se": trainer.last_loss.get("val_se"),
        "initial_val_loss": outcome.initial_val,
        "wall_time_s": wall,
        "train_time_s": trainer.clock.train_time(),
        "tokens_per_s": s.tokens / wall,
        "flops_formula": FLOPS_FORMULA,
        "flops_per_fine_step": session.fine_step_flops,
        "total_flops_blocks": s.flops_blocks,
        "diag_flops": session.runner.parts.measured_flops(),  # each measurer's own counter
        "eval_flops": session.evaluator.flops,
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "data": session.data,
        "corpus": session.data.get("corpus"),  # the text's identity: name, sha256, documents, bytes
        "held_out": session.evaluator.held_out(),
        "provenance": origin,
        "world_size": trainer.world.size,
        "compiled": trainer.compiled,
        **_how_it_ended(outcome, s),
    }
    if trainer.peak_flops:  # MFU of the rows without a compile in them, per level, against this peak
        summary["peak_flops"] = trainer.peak_flops / trainer.world.size
        summary["mfu_by_level"] = trainer.steady.mfu(trainer.peak_flops)
    summary.update(session.runner.method.summary_fields(s, session.fine_step_flops))  # the method's own fields
    if device.type == "cuda":
        summary["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return summary


def epochs(tokens: int, data: dict) -> float:
    """Passes over the training split that `tokens` training tokens (every kind of step included;
    diagnostics and evaluation not) amount to."""
    return tokens / max(int(data["train_tokens"]), 1)


def _how_it_ended(outcome: Outcome, state) -> dict:
    out = {}
    if outcome.stop_line:
        out["status_reason"] = outcome.stop_line
    if state.skipped_steps:
        out["skipped_steps"] = state.skipped_steps
    return out


def write_results(session: Session, tracker: Tracker, summary: dict, run_dir: Path) -> None:
    """The weights, then summary.json (a finished run always has both); W&B marks an unfinished run
    failed until a resume finishes it."""
    status = summary["status"]
    if status == "diverged":  # non-finite weights are of no use: the last good checkpoint holds good ones
        remove_weights(run_dir)  # those of an earlier stage (before a resume) are not this run's
    else:
        try:
            save_weights(run_dir, session.model, session.cfg.data.tokenizer)
        except OSError as err:  # full disk: atomic writes leave no partial file; say what is kept
            raise StorageError(
                f"cannot write the final weights into {run_dir} ({err.strerror or err}); the run ended and "
                f"metrics.jsonl keeps all its {tracker.rows:,} rows; no summary.json was written"
            ) from None
    tracker.write_summary(summary)
    if status != "finished":
        tracker.finish(exit_code=1)


def conclude(session: Session, outcome: Outcome, summary: dict, run_dir: Path) -> Optional[float]:
    """Raise for a run that did not finish; otherwise the `done:` line, and the final held-out loss. A
    finished run that got a stop signal after its last step still stops what runs it (RunInterrupted: a
    sweep starts no further job), its results written and nothing to resume; the signal is not handed on
    (a scheduler's requeue would only restart a finished job)."""
    if outcome.status == "interrupted":
        raise RunInterrupted(outcome.stop_line or "interrupted", outcome.signals.exit_code, outcome.signals.hand_on)
    if outcome.status == "diverged":
        raise RunDiverged(outcome.stop_line)
    s, val = session.trainer.state, summary["final_val_loss"]
    log.info(
        "done: %d fine steps%s | %.3g FLOPs (%.0f fine-step equivalents) | train %.4f | val %.4f (from %.4f) "
        "| %.0f tok/s | %.1f s | %s",
        s.fine_steps,
        "".join(f" + {n} {kind}" for kind, n in s.steps.items() if kind != StepKind.fine and n),
        s.flops, s.flops / session.fine_step_flops, _num(summary["final_train_loss"]), _num(val),
        outcome.initial_val, summary["tokens_per_s"], summary["wall_time_s"], run_dir,
    )
    if outcome.signals.requested():
        raise RunInterrupted(f"stopped by {outcome.signals.name} as the run ended: it finished (every step done, "
                             f"its results written); nothing to resume", outcome.signals.exit_code)
    return val


def _inside(runner: PlanRunner) -> str:
    """Where in its phase a run stopped inside a phase of a model other than the fine one (method/plan.py
    where_stopped)."""
    return where_stopped(runner.phase(), runner.position.step_in_phase)


def _num(x: Optional[float]) -> float:
    return math.nan if x is None else x
