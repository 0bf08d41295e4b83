"""The `model` section of the run config: the GPT decoder's shape and options (GPTConfig), the choices it
names, and the arithmetic on it that needs no weights (the padded vocabulary).

Plain dataclasses and fixed-choice names, with no torch, beside mltrain/model.py, which builds the model
from them: mltrain/config.py composes this section into the schema, so composing, checking and refusing a
config (`mltrain optim.name=lion`, `mltrain --help`) never has to import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mltrain.choice import Choice


class Norm(Choice):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Attention(Choice):
    sdpa = "sdpa"  # F.scaled_dot_product_attention (flash/memory-efficient kernels)
    explicit = "explicit"  # softmax(QK^T)V written out, so FlopCounterMode sees every matmul


@dataclass
class GPTConfig:
    """The model's shape; also the `model` node of the run config (mltrain/config.py uses this class)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64  # context length in tokens
    bias: bool = False  # biases in Linear layers (the paper's model has none)
    dropout: float = 0.0
    norm: Norm = Norm.layernorm
    norm_affine: bool = False  # False = parameter-free norms (the paper's 22,368,512 count)
    attention: Attention = Attention.sdpa
    # Filled from the tokenizer at start-up; set it only to pad the vocabulary (e.g. 50304 for speed).
    vocab_size: Optional[int] = None
    pad_vocab_to: int = 1  # the embedding/head rows, rounded up to a multiple of this (64 for speed; 1 = none)
    loss_chunk: int = 0  # the training loss this many rows (tokens) at a time, no whole fp32 logits; 0 = at once


def padded_vocab(cfg: GPTConfig) -> int:
    """Rows of the embedding/head matrix: the vocabulary rounded up to a multiple of cfg.pad_vocab_to."""
    return -(-cfg.vocab_size // cfg.pad_vocab_to) * cfg.pad_vocab_to
