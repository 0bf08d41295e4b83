"""The GPT decoder. One file, nothing about levels. Its shape and options, GPTConfig (the run config's
`model` section), are in mltrain/model/settings.py, without torch.

Pre-norm residual blocks: x_{t+1} = x_t + F(x_t, θ_t). Read as an ODE, depth is a discretisation, which
is what multilevel training exploits; this file only needs to make the blocks an indexable list, so
that another component can run any ordered subset of them (`forward(idx, blocks=...)`). A coarse model
is then the same embeddings, final norm and head around fewer blocks: no copies, no new modules.

The paper's 22,368,512-parameter model is this class with d=256, 12 blocks, 8 heads, context 256,
no biases, parameter-free norms and the GPT-2 vocabulary (50257):
    50257·256 (tied embedding/head) + 256·256 (positions) + 12 · 12·256² (blocks) = 22,368,512.

Two options for a GPU's step, both off by default (docs/scale-out.md):
- `pad_vocab_to=64` gives the embedding/head matrix rows up to a multiple of 64 (50257 -> 50304, +12,032
  parameters at d=256) so its matmuls tile; the padded ids' logits are sliced off before anything reads
  them, so no loss, sample or evaluation ever sees them.
- `loss_chunk=N` computes the training loss N rows (tokens) at a time: each chunk's logits in the compute
  dtype, upcast to fp32 per chunk, recomputed in the backward (torch.utils.checkpoint), so the fp32 logits
  of the whole batch never exist. The forward then returns no logits with its loss.
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import Iterable, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from mltrain.model.settings import Attention, GPTConfig, Norm, padded_vocab, resolved_vocab


def _chunk_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """Summed cross-entropy of one chunk: logits in the compute dtype, upcast here, over the real vocabulary."""
    logits = F.linear(h, weight)[:, :vocab]
    return F.cross_entropy(logits.float(), targets, reduction="sum")


def chunked_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab: int,
                          rows: int) -> torch.Tensor:
    """Mean cross-entropy of head(h) against targets (ids -100 ignored, as F.cross_entropy), `rows` rows at
    a time; each chunk's logits are recomputed in the backward instead of kept."""
    total = sum(checkpoint(_chunk_loss, hc, weight, tc, vocab, use_reentrant=False)
                for hc, tc in zip(h.split(rows), targets.split(rows)))
    return total / (targets != -100).sum()


def make_norm(cfg: GPTConfig) -> nn.Module:
    if cfg.norm == Norm.rmsnorm:
        return nn.RMSNorm(cfg.n_embd, elementwise_affine=cfg.norm_affine)
    # LayerNorm's `bias` flag exists only when it is affine; a parameter-free norm has neither.
    return nn.LayerNorm(cfg.n_embd, elementwise_affine=cfg.norm_affine, bias=cfg.bias and cfg.norm_affine)


class CausalSelfAttention(nn.Module):
    causal_mask: torch.Tensor  # a buffer, with attention=explicit

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        # scaled init, see GPT.init_weights (torch's stubs type a module attribute as a Tensor or Module)
        self.c_proj.residual_projection = True  # type: ignore[assignment]
        self.dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.explicit = cfg.attention == Attention.explicit
        if self.explicit:
            mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
            self.register_buffer("causal_mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        if self.explicit:
            # Plain softmax(QK^T/sqrt(d))V: slower, but every matmul is visible to FlopCounterMode,
            # which does not see inside CPU scaled_dot_product_attention.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), p=p, training=self.training)
            y = att @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.c_proj(y)
        return self.resid_dropout(y) if self.dropout else y  # no call at all for dropout 0 (~10 µs each)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.c_proj.residual_projection = True  # type: ignore[assignment]
        self.dropout = nn.Dropout(cfg.dropout)
        self.p = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.c_proj(F.gelu(self.c_fc(x)))
        return self.dropout(x) if self.p else x


class Block(nn.Module):
    """One residual step x + F(x). Self-contained, so it can be run, copied or averaged on its own."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = make_norm(cfg)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, step_size: float | torch.Tensor = 1.0) -> torch.Tensor:
        """x + h·F(x): an Euler step of size h (1 in the fine model) with F = attention then MLP. h may be a
        0-d tensor (a compiled model takes a step that changes per call as an input, not as a constant)."""
        if not isinstance(step_size, torch.Tensor) and step_size == 1.0:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        a = self.attn(self.ln_1(x))
        return x + step_size * (a + self.mlp(self.ln_2(x + a)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("GPTConfig.vocab_size is unset (it comes from the tokenizer)")
        self.config = cfg
        self.wte = nn.Embedding(padded_vocab(cfg), cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = make_norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, padded_vocab(cfg), bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix, counted once
        self.apply(self.init_weights)

    def init_weights(self, module: nn.Module) -> None:
        """Draw `module`'s weights afresh, as at construction (from torch's global RNG): GPT-2's N(0, 0.02)
        everywhere, residual projections scaled by 1/sqrt(2·n_layer) so the residual stream's variance
        does not grow with depth. `model.blocks[i].apply(model.init_weights)` redraws block i."""
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "residual_projection", False):
                std /= math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def shared_modules(self) -> list[nn.Module]:
        """The modules every coarse model shares with the fine one (everything but the blocks)."""
        return [self.wte, self.wpe, self.ln_f]  # lm_head is wte (tied)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() deduplicates the tied weight

    def forward(
        self,
        idx: torch.Tensor,
        targets: Optional[torch.Tensor] = None,
        blocks: Optional[Iterable[nn.Module]] = None,
        step_size: float | Sequence[float] | torch.Tensor = 1.0,
    ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Logits over the real vocabulary (and mean cross-entropy if targets are given; with
        config.loss_chunk, the loss alone and no logits), running `blocks` in order.

        `blocks=None` runs all of self.blocks (the fine model). Any other ordered sequence of Block
        modules gives a shallower model that shares embeddings, final norm and head. `step_size` is the
        Euler step h of every block (x + h·F(x)): a model with k times fewer blocks can take steps k
        times longer and so integrate the same depth "time" as the fine model. A sequence (or a 1-D tensor)
        gives each block its own step (a non-uniform grid), one per block in `blocks`.
        """
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        if self.config.dropout:
            x = self.drop(x)
        blocks = self.blocks if blocks is None else blocks
        if isinstance(step_size, (int, float)):
            steps = zip(blocks, repeat(step_size))
        else:
            steps = zip(blocks, step_size, strict=True)
        for block, h in steps:
            x = block(x, h)
        h, vocab = self.ln_f(x), resolved_vocab(self.config)
        if targets is not None and self.config.loss_chunk:
            return None, chunked_cross_entropy(h.view(B * T, -1), self.lm_head.weight, targets.reshape(-1), vocab,
                                               self.config.loss_chunk)
        logits = self.lm_head(h)
        if logits.size(-1) != vocab:
            logits = logits[..., :vocab]  # the padded rows' logits: never predicted
        loss: Optional[torch.Tensor] = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        return logits, loss

