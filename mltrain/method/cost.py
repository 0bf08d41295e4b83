"""What a run costs, from its plan: the one cost model of the run's start-up estimate, the study's
duration check and the study's ETA.

`plan_cost(cfg, vocab_size)` walks the phases `build_plan(cfg)` gives and adds up:

* train phases: every optimizer step at the model it trains, with the formula of mltrain/core/flops.py
  (6N+12LTd) at that model's depth: the fine model's (train.batch_size); a coarse model's, its depth
  from the scheme (`Scheme.coarse_depth` once per level) at multilevel.coarse_batch_size (a phase on
  the coarse batch stream); the schedule control's stand-in steps at the fine depth and the coarse
  batch size; a rival's sub-path steps at the
  blocks its policy runs (the mean over up to PATH_SAMPLES of the phase's steps, evenly spread);
* measurements, kept apart as the run keeps them (summary.json `eval_flops`, `diag_flops`): every
  held-out evaluation (at step 0, every train.eval_interval fine steps, at the last one, and each
  evaluate phase; forward only, the fine model on the held-out set's train.eval_tokens tokens,
  rounded up to whole sequences) and each cycle's
  diagnostics (forward and backward of the coarse model and its parent on one batch).

Plain arithmetic on the config (no torch, no data): `vocab_size` is the tokenizer's, given by the caller.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import numpy as np

from mltrain.core.flops import train_flops_per_token
from mltrain.method.coarsening import build_scheme
from mltrain.method.kinds import BatchStream, StepKind
from mltrain.method.multilevel import Diagnose
from mltrain.method.plan import Evaluate, Phase, TrainPhase, build_plan, fine_steps, train_phases
from mltrain.method.settings import ModelShape, RunSettings

PATH_SAMPLES = 64  # sub-paths drawn per phase to estimate the blocks a rival's step runs


@dataclass(frozen=True)
class Cost:
    """A run's planned FLOPs: `train` (summary.json's total_flops), `measure` (evaluation and
    diagnostics), and its optimizer steps of every level."""

    train: float
    measure: float
    steps: int

    @property
    def total(self) -> float:
        return self.train + self.measure


def plan_cost(cfg: RunSettings, vocab_size: Optional[int] = None) -> Cost:
    """The planned cost of the run `cfg` describes (`vocab_size`: the tokenizer's, when cfg's
    model.vocab_size is not resolved yet)."""
    cfg = _with_vocab(cfg, vocab_size)
    m, t = cfg.model, cfg.train
    plan = build_plan(cfg)
    per_token = _PerToken(m)
    coarse_batch = cfg.multilevel.coarse_batch_size or t.batch_size
    depths = _depths(cfg, plan)
    train, steps, done = 0.0, 0, 0
    for phase in train_phases(plan):
        batch = coarse_batch if phase.batches == BatchStream.coarse else t.batch_size
        if phase.paths is not None:
            blocks = _mean_blocks(phase, done)
        else:
            blocks = depths[len(phase.trains)]
        train += per_token(blocks) * batch * m.block_size * phase.steps
        steps += phase.steps
        done += phase.steps if phase.step_kind == StepKind.fine else 0
    return Cost(train, _measure(cfg, plan, per_token, depths), steps)


def _measure(cfg: RunSettings, plan: list[Phase], per_token: "_PerToken", depths: list[int]) -> float:
    """FLOPs of the held-out evaluations and the cycles' diagnostics."""
    m, t = cfg.model, cfg.train
    n = fine_steps(plan)
    evaluations = 1 + n // t.eval_interval + (1 if n % t.eval_interval else 0)
    evaluations += sum(1 for p in plan if isinstance(p, Evaluate))
    tokens = t.batch_size * m.block_size
    # the held-out set: ceil(eval_tokens / block_size) sequences (training/settings.py held_out_sequences; a
    # validation split too short for them holds fewer, so this is a bound), whatever the batch size
    held_out = -(-int(t.eval_tokens) // int(m.block_size)) * m.block_size
    flops = evaluations * held_out * per_token(m.n_layer) / 3  # forward only
    for p in plan:
        if isinstance(p, Diagnose):
            level = len(p.coarse)
            flops += (per_token(depths[level]) + per_token(depths[level - 1])) * tokens
    return flops


class _PerToken:
    """Training FLOPs per token of a model of n blocks with `m`'s width, vocabulary and context."""

    def __init__(self, m: ModelShape):
        if m.vocab_size is None:
            raise ValueError("model.vocab_size is unset: plan_cost resolves it from the tokenizer first")
        self.dims = (int(m.n_embd), int(m.vocab_size), int(m.block_size))

    def __call__(self, n_blocks: float) -> float:
        return train_flops_per_token(n_blocks, *self.dims)


def _depths(cfg: RunSettings, plan: list[Phase]) -> list[int]:
    """Blocks of the model at each level the plan reaches (level 0: the fine model)."""
    depths = [int(cfg.model.n_layer)]
    levels = max((len(p.where()) for p in plan), default=0)
    if levels:
        scheme = build_scheme(cfg.coarsening)
        for _ in range(levels):
            depths.append(scheme.coarse_depth(depths[-1]))
    return depths


def _mean_blocks(phase: TrainPhase, first_step: int) -> float:
    """The mean number of blocks the phase's sub-paths run (its policy asked at up to PATH_SAMPLES of
    its fine steps, counted over the run from `first_step`)."""
    if phase.steps <= 0 or phase.paths is None:
        return 0.0
    at = np.unique(np.linspace(0, phase.steps - 1, min(PATH_SAMPLES, phase.steps)).round().astype(int))
    return float(np.mean([len(phase.paths.path(first_step + int(i)).blocks) for i in at]))


def _with_vocab(cfg: RunSettings, vocab_size: Optional[int]) -> RunSettings:
    """`cfg` with model.vocab_size set: a copy, the caller's settings are left as they are (the key is
    the schema's, so a composed config takes it as a typed one does)."""
    if cfg.model.vocab_size:
        return cfg
    cfg = copy.deepcopy(cfg)
    cfg.model.vocab_size = int(vocab_size or 0)  # type: ignore[misc]  # 0: the head left out, still a bound
    return cfg
