"""Will the model fit? A lower bound on training memory, checked before anything is allocated.

The parameter count is the model's own arithmetic (tests/model/test_memory_count.py checks it against the
model built on PyTorch's `meta` device for every kind of norm, bias and attention): building it there
costs a second of start-up in a fresh process (torch loads its meta kernels). The bound counts only what training certainly holds
at once, in fp32: the weights, their gradients, the optimizer's state (SGD with momentum: one copy,
AdamW: two), the buffers, and the logits of one micro-batch with their gradient, as the forward
computes them (`logit_bytes`): the head's output at the padded vocabulary (`model.pad_vocab_to`: every
row of the head matrix, at 2 bytes at least, the compute dtype's least) and the loss's fp32 copy at the
real one, for micro-batch x context rows, or `model.loss_chunk` rows where the loss is chunked (one chunk's
logits at a time); twice, for their gradient. Activations are left out: a run refused here would
certainly run out of memory, one accepted may still do so. Only the free memory of a GPU imports torch,
so mltrain-study sizes its runs, and refuses a study, without it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

from mltrain.core.errors import ConfigError
from mltrain.model.settings import Attention, GPTConfig, Norm, padded_vocab, resolved_vocab

if TYPE_CHECKING:
    import torch

FP32 = 4
HALF = 2  # bf16/fp16: the least a compute dtype holds per value


def parameter_count(config: GPTConfig) -> tuple[int, int]:
    """(parameters, bytes of buffers) of GPT(config), without building it."""
    d, bias = config.n_embd, config.bias

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + (n_out if bias else 0)

    affine = config.norm_affine
    norm = (d if affine else 0) + (d if affine and bias and Norm(config.norm) == Norm.layernorm else 0)
    block = 2 * norm + linear(d, 3 * d) + linear(d, d) + linear(d, 4 * d) + linear(4 * d, d)
    params = padded_vocab(config) * d + config.block_size * d + config.n_layer * block + norm  # the head is tied
    explicit = Attention(config.attention) == Attention.explicit
    buffers = config.n_layer * config.block_size**2 if explicit else 0  # one bool causal mask per block
    return params, buffers


def optimizer_copies(optim: Any) -> int:
    """fp32 copies of the parameters the optimizer keeps as state."""
    if str(optim.name) == "adamw":
        return 2  # exp_avg, exp_avg_sq
    return 1 if optim.momentum > 0 else 0  # the momentum buffer


def logit_bytes(config: GPTConfig, micro_batch: int) -> int:
    """The least the logits of one micro-batch and their gradient hold at once, as GPT.forward computes
    them: rows x (padded vocabulary in the compute dtype + real vocabulary upcast), twice (with an fp32
    compute dtype and no padding: rows x vocabulary x 4 bytes, twice)."""
    rows = micro_batch * config.block_size
    if config.loss_chunk:
        rows = min(rows, config.loss_chunk)  # chunks recomputed in the backward: one chunk's logits at a time
    return 2 * rows * HALF * (padded_vocab(config) + resolved_vocab(config))


def training_bytes(params: int, buffer_bytes: int, copies: int, logits: int) -> int:
    return params * FP32 * (2 + copies) + buffer_bytes + logits


def available_bytes(device: torch.device) -> Optional[int]:
    """Memory a new allocation can use on `device` (None when unknown)."""
    if device.type == "cuda":
        import torch  # here only: the parameter count (mltrain-study's sizes) needs no torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    available = None
    try:
        with open("/proc/meminfo") as f:
            info = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f if ":" in line)}
        if "MemAvailable" in info:
            available = info["MemAvailable"] + info.get("SwapFree", 0)  # a bound: refuse only the impossible
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    # A container's own limit (cgroup v2) can be far below what the host reports.
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            available = min(available, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return available


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def check_fits(model_config: GPTConfig, optim: Any, micro_batch: int, device: torch.device) -> int:
    """ConfigError naming the model's size when it cannot train on `device`; returns its parameter count."""
    params, buffers = parameter_count(model_config)
    need = training_bytes(params, buffers, optimizer_copies(optim), logit_bytes(model_config, micro_batch))
    free = available_bytes(device)
    if free is not None and need > free:
        c, padded = model_config, padded_vocab(model_config)
        vocab = f"vocab {c.vocab_size}" + (f" padded to {padded:,}" if padded != c.vocab_size else "")
        advice = "a smaller model.* or train.batch_size, or a larger train.grad_accum"
        if padded >= 2 * resolved_vocab(c):
            advice = f"a smaller model.pad_vocab_to (the logits are computed at all {padded:,} rows), or {advice}"
        raise ConfigError(
            f"the model has {params:,} parameters ({c.n_layer} blocks, d={c.n_embd}, context {c.block_size}, "
            f"{vocab}): training it needs at least {_gb(need)} (weights, gradients, {optim.name} "
            f"state and the logits of a {micro_batch}-sequence micro-batch), more than the {_gb(free)} "
            f"available on {device.type}; choose {advice}"
        )
    return params
