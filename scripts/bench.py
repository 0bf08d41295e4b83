"""mltrain's training speed beside a plain PyTorch GPT loop of the same shape, in one process; one JSON.

What it measures (medians over --repeats rounds; each round runs every kind once, in turn, so a noisy
machine slows all kinds alike; ratios are taken within a round, then the median is reported):

* steps: ms/step and tokens/s of
  - `plain_fine`: a straightforward PyTorch GPT written below (nanoGPT's structure, SDPA attention,
    the same optimizer class and settings, nanoGPT's get_batch on the same tokens, cosine LR, clip,
    step, `loss.item()` every log_interval steps: the loop people would otherwise fork);
  - `plain_fine_sampler`: the same loop fed by mltrain's BatchSampler, to compare the steps alone;
  - `fine_single`: mltrain's fine step in a single-level run, through the real runner (Trainer.train_step,
    per-step LR, a metrics.jsonl row every log_interval steps);
  - `fine_multilevel`, `coarse`: the fine step and the coarse (even blocks) step of a multilevel run;
  on CUDA also MFU (FLOPs from mltrain/core/flops.py / time / bf16 peak) and peak memory per kind.
* prolong_ms: one δ-prolongation of the coarse model into the fine one.
* runs: a whole multilevel run (cycles of 1 fine step + 2 coarse phases, then fine steps) against a
  single-level run with as many optimizer steps: its FLOP saving (1 - FLOPs_ml / FLOPs_single) next
  to its wall-clock saving (1 - time_ml / time_single). Equal savings mean coarse steps cost wall time
  in proportion to their FLOPs.
* overhead (--overhead, CPU): on a micro model (compute negligible) the host time each method's harness
  spends per step beyond forward, backward, clip and optimizer step: a plan of single-level,
  multilevel, stacking, layer-dropping and RaPTr training is run through the real runner (LR schedule,
  sampler, sub-path draws, row bookkeeping, metrics rows, the signal check and checkpoint cadence)
  with its forward/backward, clipping, optimizer step and zero_grad timed inside the same block: the
  rest per step, beside the same figure for a bare nanoGPT-style loop (get_batch, cosine LR,
  `loss.item()` every 10 steps) around the same model (`bare`), and for that loop fed by mltrain's
  batch stream instead of get_batch (`bare_sampler`: batches a pure function of seed and index, pinned
  across versions, where get_batch draws from torch's global generator). Both loops' core work is timed
  in the same five places as the harness's. Timed by process CPU time (`--clock wall`).
* side by side (--nanogpt CHECKOUT --shakespeare INPUT_TXT): the whole run, start-up, steps and
  evaluation, of nanoGPT's own train.py on its CPU recipe (tiny shakespeare, char-level, 4 layers, 4
  heads, 128 wide, context 64, batch 12, 2,000 iterations, AdamW) beside mltrain's run of the same
  recipe, each a fresh process, in interleaved rounds; nanoGPT reads the text as byte ids, the
  vocabulary of mltrain's run (`--nanogpt-vocab chars`: its own 65 characters, a 4x smaller head, about
  3% fewer FLOPs a step); the speed ratio (> 1: mltrain faster) by wall
  time, CPU time and median step, and both held-out losses. The torch threads of both are --threads
  (default 1: on a shared CPU, OpenMP threads waiting on each other swamp what is measured).
* speed options (--speed-options): mltrain's fine step with the vocabulary padded to a multiple of 64
  (`fine_padded`) and with the loss computed 4,096 rows at a time (`fine_chunked`), each against
  `fine_single`: the GPU measurement that decides whether they are worth turning on.
* compile (--compile): dynamo's own counters (frames compiled, graphs) after warm-up and at the end:
  `recompiles_after_warmup` must be 0, i.e. the fine and each coarse model compiled once.

    python scripts/bench.py                                   # tiny: nanoGPT's CPU recipe shape
    python scripts/bench.py --model gpt22m --batch 64 --compile   # the paper's model, on a GPU
    python scripts/bench.py --overhead --threads 1            # host time per step, per method
    python scripts/bench.py --nanogpt ~/nanoGPT --shakespeare input.txt   # the whole run beside nanoGPT

The tiny shape is nanoGPT's "baby GPT on a CPU" recipe (4 blocks, 4 heads, d=128, context 64,
batch 12) on the embedded corpus with byte tokens; gpt22m is the paper's model (vocabulary 50257,
byte tokens padded to it: the data are not what is measured).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from hydra import compose, initialize_config_module

from mltrain.config import register_configs, typed
from mltrain.data import BatchSampler, load_tokens
from mltrain.core.flops import train_flops_per_step
from mltrain.training.devices import peak_flops
from mltrain.method.kinds import PhaseKind
from mltrain.method.plan import Phase, TrainPhase
from mltrain.run import build
from mltrain.training.batches import DeviceBatches
from mltrain.runs.tracking import Tracker
from mltrain.training.trainer import TrainState

SHAPES = {
    # nanoGPT README, "baby GPT" on a CPU: n_layer 4, n_head 4, n_embd 128, block 64, batch 12
    "tiny": (["model=tiny", "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=64"], 12),
    "gpt22m": (["model=gpt22m", "data.tokenizer=bytes", "model.vocab_size=50257"], 64),
}


# ---------------------------------------------------------------------------------------------
# The plain reference: a GPT and a loop as one would write them by hand


class PlainBlock(nn.Module):
    def __init__(self, d: int, n_head: int, bias: bool, affine: bool):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, elementwise_affine=affine, bias=bias and affine)
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.attn_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d, elementwise_affine=affine, bias=bias and affine)
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.mlp_proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class PlainGPT(nn.Module):
    def __init__(self, vocab: int, n_layer: int, n_head: int, d: int, block_size: int, bias: bool, affine: bool):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList(PlainBlock(d, n_head, bias, affine) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d, elementwise_affine=affine, bias=bias and affine)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def plain_loop(cfg, tokens: np.ndarray, device: torch.device, dtype, compile_: bool,
               sampler=None) -> Callable[[], None]:
    """One step of the plain loop; batches from nanoGPT's get_batch, or from `sampler` (mltrain's
    BatchSampler) to compare the steps alone."""
    m, t, o = cfg.model, cfg.train, cfg.optim
    model = PlainGPT(m.vocab_size, m.n_layer, m.n_head, m.n_embd, m.block_size, m.bias, m.norm_affine).to(device)
    fused = True if device.type == "cuda" else None
    if o.name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, fused=fused)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), fused=fused)
    if compile_:
        from mltrain.training.compiling import compile_options

        fwd = torch.compile(model, **compile_options())
    else:
        fwd = model
    ctx = torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
    B, T = t.batch_size, m.block_size
    step = [0]

    def get_batch():  # nanoGPT's get_batch
        ix = torch.randint(len(tokens) - T, (B,))
        x = torch.stack([torch.from_numpy(tokens[i : i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(tokens[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
        if device.type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    def one_step():
        lr = o.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, step[0] / t.max_steps)))  # cosine, as nanoGPT
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch() if sampler is None else sampler.next_batch()
        if sampler is not None and device.type == "cuda":
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        with ctx:
            _, loss = fwd(x, y)
        loss.backward()
        if t.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step[0] += 1
        if step[0] % t.log_interval == 0:
            loss.item()

    return one_step


# ---------------------------------------------------------------------------------------------
# mltrain through its runner


# The model's speed options (mltrain/model/gpt.py), each a single-level fine step of its own with --speed-options.
SPEED_OPTIONS = {"fine_padded": ["model.pad_vocab_to=64"], "fine_chunked": ["model.loss_chunk=4096"]}


def run_plan(session, plan: list[Phase]) -> None:
    """Execute `plan` with the session's runner from a fresh position (weights keep training)."""
    runner = session.runner
    runner.plan = plan
    runner.trainer.state = TrainState()
    fresh_position(runner)
    runner.run()


def fresh_position(runner) -> None:
    """The runner back at its plan's start (the runner owns its position; an earlier mltrain kept it in
    the train state, which the caller has just reset)."""
    if hasattr(runner, "position"):
        runner.position.phase_index, runner.position.step_in_phase = 0, 0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {"frames_compiled": counters["frames"]["ok"], "graphs": counters["stats"]["unique_graphs"]}


def session(cfg, out_dir: Path, name: str):
    """A run built as `mltrain` builds it, logging to a real metrics.jsonl (in a temporary folder)."""
    tracker = Tracker(out_dir / name, cfg.logger, {}, name=name, group="bench", job_type=name)
    built = build(cfg, tracker.log)
    built.trainer.close()  # no progress bar
    return built


# ---------------------------------------------------------------------------------------------
# --overhead: the harness's host time per step, beyond forward/backward/update

OVERHEAD_MODEL = ["model=tiny", "model.n_layer=4", "model.n_head=1", "model.n_embd=8", "model.block_size=8",
                  "train.batch_size=2"]
OVERHEAD_METHODS = {
    "single": [],
    "multilevel": ["coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=40",
                   "multilevel.coarse_log_interval=10"],
    "stacking": ["experiment=stacking"],
    "layer_drop": ["experiment=layer_drop", "layer_drop.gamma=0.01"],
    "raptr": ["experiment=raptr"],
}


class CoreTimer:
    """Time spent in the work any training loop must do (forward and backward, clipping, optimizer step,
    zero_grad), summed over the steps of a block: what is left of the block's time is the harness's."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.spent = clock, 0.0

    def timed(self, fn: Callable) -> Callable:
        def run(*args, **kwargs):
            t0 = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += self.clock() - t0

        return run


class Instrumented:
    """While active, `trainer`'s forward, every backward (torch.Tensor.backward), every optimizer's step
    and zero_grad and torch.nn.utils.clip_grad_norm_ are timed by `core`, and so is `evaluator`'s held-out
    evaluation (the plan's last fine step evaluates: not a per-step cost). The diagnostics' backward (once
    per cycle of a multilevel plan) is timed as core work too."""

    def __init__(self, trainer, evaluator, optimizers, core: CoreTimer):
        self.trainer, self.evaluator, self.optimizers, self.core = trainer, evaluator, optimizers, core

    def __enter__(self):
        self._clip = torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = self.core.timed(self._clip)
        self._backward = torch.Tensor.backward
        torch.Tensor.backward = self.core.timed(self._backward)
        self.trainer._forward = self.core.timed(type(self.trainer)._forward.__get__(self.trainer))
        self.evaluator.log_eval = self.core.timed(type(self.evaluator).log_eval.__get__(self.evaluator))
        for opt in self.optimizers:
            opt.step, opt.zero_grad = self.core.timed(opt.step), self.core.timed(opt.zero_grad)
        return self

    def __exit__(self, *exc):
        torch.nn.utils.clip_grad_norm_ = self._clip
        torch.Tensor.backward = self._backward
        del self.trainer._forward, self.evaluator.log_eval
        for opt in self.optimizers:
            del opt.step, opt.zero_grad


def bare_loop(model, cfg, tokens: np.ndarray, n: int, core: CoreTimer,
              next_batch: Optional[Callable[[], tuple]] = None) -> Callable[[], None]:
    """nanoGPT's loop around the same model: get_batch, cosine LR, forward, backward, clip, step,
    zero_grad, `loss.item()` every log_interval steps; its core work timed by `core` as Instrumented
    times the harness's: forward, backward, clipping, the optimizer step and zero_grad each timed apart.
    `next_batch`: the batches from there instead of nanoGPT's get_batch (torch's global generator).

    Timed apart, not as one region: each region costs a few reads of the clock (the process's CPU time
    is a system call, dearer after a step's work than in a tight loop) that fall partly outside it. With
    the bare loop timed as one region and the harness as five, those reads alone made the harness look
    ~75 µs a step dearer (measured: the same bare loop read 162 µs/step as one region, 238 as five)."""
    t, o, T, B = cfg.train, cfg.optim, cfg.model.block_size, cfg.train.batch_size
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum)
    params = list(model.parameters())
    step = [0]
    forward, clip = core.timed(model), core.timed(torch.nn.utils.clip_grad_norm_)
    backward = core.timed(torch.Tensor.backward)
    update, zero_grad = core.timed(opt.step), core.timed(opt.zero_grad)

    def run() -> None:
        for _ in range(n):
            lr = o.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, step[0] / t.max_steps)))
            for g in opt.param_groups:
                g["lr"] = lr
            if next_batch is None:
                ix = torch.randint(len(tokens) - T, (B,))
                x = torch.stack([torch.from_numpy(tokens[i : i + T].astype(np.int64)) for i in ix])
                y = torch.stack([torch.from_numpy(tokens[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
            else:
                x, y = next_batch()
            _, loss = forward(x, y)
            backward(loss)
            clip(params, t.grad_clip)
            update()
            zero_grad(set_to_none=True)
            step[0] += 1
            if step[0] % t.log_interval == 0:
                loss.item()

    return run


def harness_run(built, tmp: Path) -> Callable[[], None]:
    """The plan of `built`, from its start, with the hooks a real run has: the signal check between
    steps and the checkpoint cadence after each (train.checkpoint_interval=0: never due)."""
    from mltrain import run as run_module
    from mltrain.training.checkpoint import CheckpointFolder
    from mltrain.training.resume import StopSignals

    plan = list(built.runner.plan)
    try:  # train.checkpoint_interval=0: never due
        from mltrain.training.checkpoint import CheckpointSaver

        saver = CheckpointSaver(built.runner, CheckpointFolder(tmp, keep=1), None, {}, 0.0, 0, built.fine_step_flops)
    except ImportError:  # an earlier mltrain (--mltrain-other, or on PYTHONPATH to measure it)
        saver = run_module.CheckpointSaver(built, CheckpointFolder(tmp, keep=1), None, {}, 0.0)
    should_stop = run_module._stop_rule(StopSignals())

    def run() -> None:
        built.runner.plan = plan
        built.runner.trainer.state = TrainState()
        fresh_position(built.runner)
        built.runner.run(should_stop=should_stop, after_step=saver.after_step)

    return run


def measure_overhead(args, tmp: Path) -> dict:
    """Per method: (a block's time - the time inside its core work) / steps, the core work timed inside
    the same block, so a slow or busy machine scales both alike; medians over interleaved rounds. The
    same for the bare loop around the full model."""
    n = args.overhead_steps
    common = [*OVERHEAD_MODEL, "device=cpu", "train.compile=false", "train.progress=false", "train.log_interval=10",
              "train.eval_interval=1000000", "train.checkpoint_interval=0", "logger=jsonl", "multilevel.diagnostics=false",
              "multilevel.eval_every_cycle=false", "schedule.warmup_steps=10"]
    # CPU time of this process, not wall time: on a machine shared with other work a process waiting
    # for a core is not doing harness work (with --threads 1, the process's CPU time is the step's).
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfgs = {name: typed(compose("config", overrides=[*common, f"train.max_steps={n}", *extra]))
                for name, extra in OVERHEAD_METHODS.items()}
    blocks: dict[str, tuple[Callable[[], None], CoreTimer, Callable[[], int]]] = {}
    for name, cfg in cfgs.items():
        built = session(cfg, tmp, name)
        harness = harness_run(built, tmp / name)
        harness()  # warm-up: every optimizer exists after it
        runner, core = built.runner, CoreTimer(clock)
        optimizers = [runner.fine_optimizer, *runner.own_optimizers.values()]

        def block(harness=harness, built=built, optimizers=optimizers, core=core):
            with Instrumented(built.trainer, built.evaluator, optimizers, core):
                harness()

        blocks[name] = (block, core, lambda state=built.trainer: state.state.optimizer_steps)
    cfg = cfgs["single"]
    data = load_tokens(cfg.data)
    core = CoreTimer(clock)
    model, tokens = build(cfg, lambda row: None).model, np.concatenate(data.train)
    blocks["bare"] = (bare_loop(model, cfg, tokens, n, core), core, lambda: n)
    # The same loop drawing its batches as every mltrain run must: each a pure function of (seed, index),
    # pinned bit for bit across versions (tests/data/test_batches_pinned.py), drawn ahead in blocks.
    stream = DeviceBatches(BatchSampler(data.train, cfg.train.batch_size, cfg.model.block_size, seed=0),
                           torch.device("cpu"))
    core_s = CoreTimer(clock)
    blocks["bare_sampler"] = (bare_loop(model, cfg, tokens, n, core_s, stream.next_batch), core_s,
                              lambda: n)
    for block, _, _ in blocks.values():
        block()
    over: dict[str, list[float]] = {k: [] for k in blocks}
    step: dict[str, list[float]] = {k: [] for k in blocks}
    for _ in range(args.repeats):
        for name, (block, core, steps) in blocks.items():
            core.spent = 0.0
            t0 = clock()
            block()
            total = clock() - t0
            over[name].append((total - core.spent) / steps() * 1e6)
            step[name].append(total / steps() * 1e6)
    out = {name: {"overhead_us_per_step": statistics.median(over[name]), "step_us": statistics.median(step[name]),
                  "steps": blocks[name][2]()} for name in blocks}
    return {"config": {"model": OVERHEAD_MODEL, "threads": torch.get_num_threads(), "repeats": args.repeats,
                       "clock": "process CPU time" if args.clock == "cpu" else "wall", "torch": torch.__version__},
            "overhead": out}


# ---------------------------------------------------------------------------------------------
# --nanogpt: the whole run beside nanoGPT's own train.py, on nanoGPT's CPU recipe

# nanoGPT's README, "I only have a macbook": tiny shakespeare, char-level, on a CPU.
NANOGPT_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                  "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                  "--n_embd=128", "--dropout=0.0"]


def mltrain_recipe(data: Path, iters: int, run_dir: Path) -> list[str]:
    """The same run in mltrain's terms: the same text split 90/10 (its last tenth held out), byte tokens
    (one per character of this ASCII text), the model, batch, AdamW settings, LR schedule (warm-up 100,
    cosine to 1e-4), clipping, evaluation every 250 steps on 15,360 held-out tokens (20 batches of 12), layer norms with a weight and no
    bias (nanoGPT's); the defaults for the rest."""
    return ["data=text", f"data.path={data}", "data.val_fraction=0.1", "model=tiny", "model.n_layer=4",
            "model.n_head=4", "model.n_embd=128", "model.block_size=64", "model.dropout=0.0", "model.norm_affine=true",
            "train.batch_size=12",
            f"train.max_steps={iters}", "train.eval_interval=250", "train.eval_tokens=15360", "optim=adamw",
            "optim.lr=1e-3", "optim.betas=[0.9,0.99]", "optim.weight_decay=0.1", "schedule.warmup_steps=100",
            "schedule.min_lr=1e-4", "train.grad_clip=1.0", "train.progress=false", f"hydra.run.dir={run_dir}"]


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float, str]:
    """Run `cmd`; its wall time, its CPU time (user + system, children included) and its output."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout + proc.stderr


def nanogpt_figures(output: str, wall: float) -> dict:
    """From train.py's log: the last held-out loss, the median iteration, and the start-up (the wall time
    not inside its loop, whose iterations it times itself, evaluations included)."""
    import re

    evals = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", output)
    iters = [float(ms) for ms in re.findall(r"iter \d+: loss [\d.]+, time ([\d.]+)ms", output)]
    return {"final_val_loss": float(evals[-1][2]), "final_step": int(evals[-1][0]),
            "step_ms_median": statistics.median(iters), "outside_loop_s": wall - sum(iters) / 1e3}


def mltrain_figures(run_dir: Path, wall: float) -> dict:
    """From the run's files: held-out loss (and its standard error), the median step time from its train
    rows, start-up (the process's wall time before the run's clock started and after it stopped), and the
    time spent evaluating and checkpointing (apart from training)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    per_step = [(b["train_time_s"] - a["train_time_s"]) / (b["step"] - a["step"]) * 1e3 for a, b in zip(train, train[1:])]
    return {"final_val_loss": summary["final_val_loss"], "final_val_loss_se": summary["final_val_loss_se"],
            "final_step": summary["fine_steps"], "step_ms_median": statistics.median(per_step),
            "outside_run_s": wall - summary["wall_time_s"],
            "evaluation_and_checkpoints_s": summary["wall_time_s"] - summary["train_time_s"]}


def nanogpt_on_held_out(work: Path, checkpoint: Path, data: Path, iters: int) -> dict:
    """nanoGPT's saved model (its best held-out estimate) on mltrain's own held-out sequences, the very
    batches mltrain's final_val_loss is the mean over (characters mapped to nanoGPT's ids): a paired
    comparison, free of the two estimates' sampling noise."""
    import pickle

    from mltrain.training.settings import held_out_sequences

    sys.path.insert(0, str(work))
    try:
        from model import GPT as NanoGPT, GPTConfig as NanoConfig  # nanoGPT's model.py
    finally:
        sys.path.remove(str(work))
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    with contextlib.redirect_stdout(sys.stderr):  # it prints its size; stdout is this script's JSON
        model = NanoGPT(NanoConfig(**saved["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in saved["model"].items()})
    model.eval()
    stoi = pickle.loads((work / "data" / "shakespeare_char" / "meta.pkl").read_bytes())["stoi"]
    table = torch.zeros(256, dtype=torch.long)
    for ch, i in stoi.items():
        table[ord(ch)] = i
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = typed(compose("config", overrides=mltrain_recipe(data, iters, Path("unused"))[:-1]))
    val = BatchSampler(load_tokens(cfg.data).val, 1, cfg.model.block_size, seed=0, split="val")
    held_out = val.spread(held_out_sequences(cfg.train, cfg.model.block_size))
    losses = []
    with torch.no_grad():
        for x, y in zip(*(part.split(cfg.train.batch_size) for part in held_out.unbind(0))):
            logits, _ = model(table[x], table[y])
            losses.append(F.cross_entropy(logits.transpose(1, 2), table[y], reduction="none").mean(dim=1))
    per_sequence = torch.cat(losses)
    return {"loss": per_sequence.mean().item(), "se": (per_sequence.std() / per_sequence.numel() ** 0.5).item(),
            "checkpoint_step": int(saved["iter_num"]), "sequences": per_sequence.numel()}


def as_bytes(folder: Path, data: Path) -> None:
    """nanoGPT's prepared data (train.bin, val.bin, meta.pkl) rewritten with byte ids, split as its
    prepare.py splits (the first 90% of the text for training): the vocabulary mltrain's `bytes` tokenizer
    has (256), so both models have the same embedding and head and each step the same FLOPs. With
    nanoGPT's own 65 characters its head is a quarter of mltrain's (about 3% of a step's FLOPs here)."""
    import pickle

    text = data.read_bytes()
    if not text.isascii():  # a character is then more than one byte: the two splits would not align
        raise SystemExit(f"--nanogpt-vocab bytes: {data} is not ASCII text; use --nanogpt-vocab chars")
    n = int(len(text) * 0.9)
    np.frombuffer(text[:n], dtype=np.uint8).astype(np.uint16).tofile(folder / "train.bin")
    np.frombuffer(text[n:], dtype=np.uint8).astype(np.uint16).tofile(folder / "val.bin")
    meta = {"vocab_size": 256, "itos": {i: chr(i) for i in range(256)}, "stoi": {chr(i): i for i in range(256)}}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))


def side_by_side(args, tmp: Path) -> dict:
    """Interleaved rounds of nanoGPT's train.py and mltrain on the same recipe, each a fresh process
    timed whole (start-up, steps, evaluation); ratios within a round, medians over rounds."""
    import os
    import shutil

    nanogpt, data = Path(args.nanogpt).resolve(), Path(args.shakespeare).resolve()
    for need in (nanogpt / "train.py", nanogpt / "configurator.py", nanogpt / "config" / "train_shakespeare_char.py",
                 nanogpt / "data" / "shakespeare_char" / "prepare.py", data):
        if not need.is_file():
            raise SystemExit(f"--nanogpt/--shakespeare: {need} is not a file (a nanoGPT checkout and tiny "
                             f"shakespeare's input.txt are needed)")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads or 1), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled",
           "MLTRAIN_CACHE": str(tmp / "cache")}
    work = tmp / "nanoGPT"  # a copy: train.py reads configurator.py and data/ from its working dir
    shutil.copytree(nanogpt, work, ignore=shutil.ignore_patterns(".git", "out*", "*.bin", "*.pkl", "input.txt"))
    shutil.copyfile(data, work / "data" / "shakespeare_char" / "input.txt")
    # the data preparation of both, before any timing: nanoGPT's prepare.py, mltrain's token cache
    timed([sys.executable, "data/shakespeare_char/prepare.py"], work, env)
    if args.nanogpt_vocab == "bytes":
        as_bytes(work / "data" / "shakespeare_char", data)
    iters = args.nanogpt_iters
    timed([sys.executable, "-m", "mltrain.cli", *mltrain_recipe(data, 1, tmp / "warm")], tmp, env)
    nano_cmd = [sys.executable, "train.py", *NANOGPT_RECIPE, f"--max_iters={iters}", f"--lr_decay_iters={iters}",
                f"--out_dir={tmp / 'out-nanogpt'}"]
    tools = {"mltrain": {**env}}
    if args.mltrain_other:  # another checkout of mltrain (an earlier commit, say) run the same way, beside
        other = Path(args.mltrain_other).resolve()
        conf = other / "mltrain" / "conf"
        if not conf.exists():  # a plain checkout: the package's conf/ is the top-level one
            conf.symlink_to(other / "conf", target_is_directory=True)
        tools["mltrain_other"] = {**env, "PYTHONPATH": str(other)}
    rounds = []
    for r in range(args.nanogpt_rounds):
        runs = {}
        order = ["nanogpt", *tools]
        order = order if r % 2 == 0 else order[::-1]
        for name in order:
            if name == "nanogpt":
                wall, cpu, output = timed(nano_cmd, work, env)
                runs[name] = {"wall_s": wall, "cpu_s": cpu, **nanogpt_figures(output, wall)}
            else:
                run_dir = tmp / f"{name}-{r}"
                cmd = [sys.executable, "-m", "mltrain.cli", *mltrain_recipe(data, iters, run_dir)]
                wall, cpu, _ = timed(cmd, tmp, tools[name])
                runs[name] = {"wall_s": wall, "cpu_s": cpu, **mltrain_figures(run_dir, wall)}
        print(json.dumps({"round": r, **runs}), file=sys.stderr, flush=True)
        rounds.append(runs)

    def ratio(key: str, tool: str) -> float:  # > 1: mltrain is faster
        return statistics.median(r["nanogpt"][key] / r[tool][key] for r in rounds)

    def median(tool: str, key: str) -> float:
        return statistics.median(r[tool][key] for r in rounds)

    out = {"config": {"recipe": " ".join(NANOGPT_RECIPE), "nanogpt_vocab": args.nanogpt_vocab, "iters": iters,
                      "rounds": args.nanogpt_rounds,
                      "threads": int(env["OMP_NUM_THREADS"]), "torch": torch.__version__,
                      "mltrain": " ".join(mltrain_recipe(data, iters, Path("RUN"))), "mltrain_other": args.mltrain_other}}
    for tool in tools:
        out[f"speed_vs_nanogpt{tool.removeprefix('mltrain')}"] = {
            "wall": ratio("wall_s", tool), "cpu": ratio("cpu_s", tool), "step": ratio("step_ms_median", tool)}
    for tool in ("nanogpt", *tools):
        out[tool] = {k: median(tool, k) for k in rounds[0][tool]}
    out["nanogpt"]["on_mltrain_held_out"] = nanogpt_on_held_out(work, tmp / "out-nanogpt" / "ckpt.pt", data, iters)
    out["rounds"] = rounds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--batch", type=int, help="sequences per step (default: tiny 12, gpt22m 64)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="auto: bf16 autocast on CUDA, fp32 on CPU")
    ap.add_argument("--optim", default="sgd", choices=["sgd", "adamw"])
    ap.add_argument("--compile", action="store_true", help="train.compile=true, and torch.compile for the plain loop")
    ap.add_argument("--speed-options", action="store_true", help="also the fine step with each of the model's "
                    "speed options (fine_padded: model.pad_vocab_to=64, fine_chunked: model.loss_chunk=4096)")
    ap.add_argument("--steps", type=int, default=20, help="steps per timed block (a multiple of 10)")
    ap.add_argument("--repeats", type=int, default=9, help="rounds; medians are reported")
    ap.add_argument("--cycles", type=int, default=2, help="cycles of the whole multilevel run")
    ap.add_argument("--coarse-steps", type=int, default=20, help="steps per coarse phase in the whole run")
    ap.add_argument("--after", type=int, default=20, help="fine steps after the cycles in the whole run")
    ap.add_argument("--run-repeats", type=int, default=3, help="rounds of the whole-run comparison")
    ap.add_argument("--overhead", action="store_true", help="the harness's host time per step beyond forward/"
                    "backward/update, per method, on a micro model, beside a bare nanoGPT-style loop (CPU)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="--overhead: time steps by this process's CPU time (default; a shared machine) or wall time")
    ap.add_argument("--overhead-steps", type=int, default=200, help="--overhead: steps per round and method")
    ap.add_argument("--nanogpt", metavar="CHECKOUT", help="the whole run beside nanoGPT's train.py (a checkout "
                    "of karpathy/nanoGPT) on its CPU recipe; needs --shakespeare")
    ap.add_argument("--shakespeare", metavar="INPUT_TXT", help="--nanogpt: tiny shakespeare's input.txt")
    ap.add_argument("--nanogpt-iters", type=int, default=2000, help="--nanogpt: iterations (the recipe's 2000)")
    ap.add_argument("--nanogpt-rounds", type=int, default=3, help="--nanogpt: interleaved rounds")
    ap.add_argument("--nanogpt-vocab", choices=["bytes", "chars"], default="bytes",
                    help="--nanogpt: nanoGPT's data as byte ids (default: the vocabulary of mltrain's bytes "
                         "tokenizer, so both models are the same) or its own 65 characters (its head 4x smaller)")
    ap.add_argument("--mltrain-other", metavar="CHECKOUT", help="--nanogpt: another mltrain checkout (an earlier "
                    "commit) run beside, as mltrain_other")
    ap.add_argument("--peak-flops", type=float, help="FLOP/s of the device for MFU (default: the table's bf16 "
                    "peak of the card, mltrain/training/devices.py)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice); on a CPU shared "
                    "with other work, 1 avoids OpenMP threads waiting on each other")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.steps % 10:
        ap.error("--steps must be a multiple of 10 (the log interval), so each block ends on a log row")
    with tempfile.TemporaryDirectory(prefix="mltrain-bench-") as tmp:
        if args.nanogpt or args.shakespeare:
            if not (args.nanogpt and args.shakespeare):
                ap.error("--nanogpt and --shakespeare go together")
            out = side_by_side(args, Path(tmp))
        elif args.overhead:
            out = measure_overhead(args, Path(tmp))
        else:
            out = measure(args, Path(tmp))
    json.dump(out, sys.stdout, indent=2)
    print()


def measure(args, tmp: Path) -> dict:
    shape, default_batch = SHAPES[args.model]
    batch = args.batch or default_batch
    cycles, S, after = args.cycles, args.coarse_steps, args.after
    common = [*shape, f"train.batch_size={batch}", f"device={args.device}", f"train.dtype={args.dtype}",
              f"optim={args.optim}", f"train.compile={str(args.compile).lower()}", "train.progress=false",
              "train.log_interval=10", "train.eval_interval=1000000", "logger=jsonl",
              "multilevel.coarse_log_interval=10", "multilevel.diagnostics=false", "multilevel.eval_every_cycle=false"]
    ml_steps = cycles + after
    single_steps = cycles * (1 + 2 * S) + after  # as many optimizer steps as the multilevel run
    register_configs()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg_single = typed(compose("config", overrides=[*common, f"train.max_steps={single_steps}"]))
        cfg_ml = typed(compose("config", overrides=[*common, f"train.max_steps={ml_steps}", "coarsening=evenodd",
                                                   f"multilevel.n_cycles={cycles}", f"multilevel.coarse_steps={S}"]))
        cfg_options = {k: typed(compose("config", overrides=[*common, f"train.max_steps={single_steps}", *extra]))
                       for k, extra in (SPEED_OPTIONS.items() if args.speed_options else ())}
    single = session(cfg_single, tmp, "single")
    ml = session(cfg_ml, tmp, "multilevel")
    options = {k: session(c, tmp, k) for k, c in cfg_options.items()}  # built before any compile (it resets dynamo)
    cfg_single = single.cfg  # as built: model.vocab_size resolved from the tokenizer
    device, dtype = single.trainer.device, single.trainer.dtype
    whole_plans = {"single": single.runner.plan, "multilevel": ml.runner.plan}
    data = load_tokens(cfg_single.data)
    tokens = np.concatenate(data.train)
    m = cfg_single.model

    n = args.steps
    plain = plain_loop(cfg_single, tokens, device, dtype, args.compile)
    plain_sampler = plain_loop(cfg_single, tokens, device, dtype, args.compile,
                               sampler=BatchSampler(data.train, batch, m.block_size, seed=1))
    coarse_phase = next(p for p in ml.runner.plan if p.kind == PhaseKind.train and p.trains)  # coarse model A's
    kinds: dict[str, Callable[[], None]] = {
        "plain_fine": lambda: [plain() for _ in range(n)],
        "plain_fine_sampler": lambda: [plain_sampler() for _ in range(n)],
        "fine_single": lambda: run_plan(single, [TrainPhase(steps=n)]),
        "fine_multilevel": lambda: run_plan(ml, [TrainPhase(steps=n)]),
        "coarse": lambda: run_plan(ml, [replace(coarse_phase, steps=n)]),
        **{k: (lambda built=built: run_plan(built, [TrainPhase(steps=n)])) for k, built in options.items()},
    }
    flops = {k: train_flops_per_step(m.n_layer, m.n_embd, m.vocab_size, m.block_size, batch) for k in kinds}
    flops["coarse"] = train_flops_per_step(m.n_layer // 2, m.n_embd, m.vocab_size, m.block_size, batch)

    t_warm = time.perf_counter()
    for fn in kinds.values():  # warm-up: compilation, allocator, lazily created optimizer state
        fn()
    for name in whole_plans:  # compiles nothing new, but warms the per-cycle paths (prolongation, views)
        run_plan(single if name == "single" else ml, whole_plans[name])
    sync(device)
    warmup_s = time.perf_counter() - t_warm
    compiled_after_warmup = dynamo_counts() if args.compile else None

    cuda = device.type == "cuda"
    times = {k: [] for k in kinds}
    peak_mem = {k: 0 for k in kinds}
    for _ in range(args.repeats):
        for name, fn in kinds.items():
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append((time.perf_counter() - t0) / n)
            if cuda:
                peak_mem[name] = max(peak_mem[name], torch.cuda.max_memory_allocated(device))

    prolong = []
    coarse_view = ml.runner.parts.hierarchy.view((0,))
    for _ in range(args.repeats):
        sync(device)
        t0 = time.perf_counter()
        ml.runner.parts.hierarchy.prolong(coarse_view)
        sync(device)
        prolong.append(time.perf_counter() - t0)

    run_times = {k: [] for k in whole_plans}
    run_flops = {}
    for _ in range(args.run_repeats):
        for name, plan in whole_plans.items():
            built = single if name == "single" else ml
            sync(device)
            t0 = time.perf_counter()
            run_plan(built, plan)
            sync(device)
            run_times[name].append(time.perf_counter() - t0)
            run_flops[name] = built.trainer.state.flops
    compiled_end = dynamo_counts() if args.compile else None

    tokens_per_step = batch * m.block_size
    peak = peak_flops(device, args.peak_flops) if dtype == torch.bfloat16 or args.peak_flops else None
    steps = {}
    for k, ts in times.items():
        med = statistics.median(ts)
        steps[k] = {"ms_per_step": med * 1e3, "tokens_per_s": tokens_per_step / med, "flops_per_step": flops[k],
                    "mfu": flops[k] / med / peak if peak else None,
                    "peak_memory_bytes": peak_mem[k] if cuda else None}

    def speed(a: str, b: str) -> float:
        """Median over rounds of time_b / time_a: how many times faster `a` runs than `b`."""
        return statistics.median(tb / ta for ta, tb in zip(times[a], times[b]))

    wall = {k: statistics.median(v) for k, v in run_times.items()}
    out = {
        "config": {"model": args.model, "n_layer": m.n_layer, "n_head": m.n_head, "n_embd": m.n_embd,
                   "block_size": m.block_size, "vocab_size": m.vocab_size, "batch": batch,
                   "tokens_per_step": tokens_per_step,
                   "device": torch.cuda.get_device_name(device) if cuda else str(device),
                   "threads": torch.get_num_threads(), "dtype": str(dtype).replace("torch.", "") if dtype else "float32",
                   "optimizer": args.optim, "compile": args.compile, "steps_per_block": n,
                   "repeats": args.repeats, "torch": torch.__version__, "warmup_s": warmup_s},
        "steps": steps,
        "ratios": {
            # tokens/s of mltrain's fine step over the plain loop's (>= 1: mltrain is as fast or faster)
            "fine_single_vs_plain": speed("fine_single", "plain_fine"),
            "fine_multilevel_vs_plain": speed("fine_multilevel", "plain_fine"),
            # the same, the plain loop fed by mltrain's sampler: the step alone, without the data path
            "fine_single_vs_plain_sampler": speed("fine_single", "plain_fine_sampler"),
            "coarse_time_vs_fine": 1 / speed("coarse", "fine_multilevel"),
            "coarse_flops_vs_fine": flops["coarse"] / flops["fine_multilevel"],
            # --speed-options: how many times faster the fine step runs with each option
            **{f"{k}_vs_fine_single": speed(k, "fine_single") for k in options},
        },
        "prolong_ms": statistics.median(prolong) * 1e3,
        "runs": {
            "plan": f"multilevel: {cycles} cycles x (1 fine + 2 x {S} coarse) + {after} fine steps; "
                    f"single: {single_steps} fine steps (as many optimizer steps)",
            "single": {"wall_s": wall["single"], "flops": run_flops["single"]},
            "multilevel": {"wall_s": wall["multilevel"], "flops": run_flops["multilevel"]},
            "flop_saving": 1 - run_flops["multilevel"] / run_flops["single"],
            "wall_clock_saving": statistics.median(1 - t_ml / t_sl for t_sl, t_ml in zip(run_times["single"],
                                                                                         run_times["multilevel"])),
            "repeats": args.run_repeats,
        },
    }
    if args.compile:
        out["compile"] = {"after_warmup": compiled_after_warmup, "at_end": compiled_end,
                          "recompiles_after_warmup": compiled_end["frames_compiled"] - compiled_after_warmup["frames_compiled"]}
    return out


if __name__ == "__main__":
    main()
