"""The `model` section of the run config: the GPT decoder's shape and options (GPTConfig), the choices it
names, and what follows from it without weights (the padded vocabulary, the vocabulary resolved).

Plain dataclasses and fixed-choice names, with no torch, beside mltrain/model/gpt.py, which builds the model
from them: mltrain/config.py composes this section into the schema, so composing, checking and refusing a
config (`mltrain optim.name=lion`, `mltrain --help`) never has to import torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from mltrain.core.choice import Choice
from mltrain.core.errors import ConfigError


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


def resolved_vocab(cfg: GPTConfig) -> int:
    """cfg.vocab_size, once model_config has filled it from the tokenizer."""
    if cfg.vocab_size is None:
        raise ValueError("GPTConfig.vocab_size is unset (it comes from the tokenizer)")
    return cfg.vocab_size


def padded_vocab(cfg: GPTConfig) -> int:
    """Rows of the embedding/head matrix: the vocabulary rounded up to a multiple of cfg.pad_vocab_to."""
    return -(-resolved_vocab(cfg) // cfg.pad_vocab_to) * cfg.pad_vocab_to


def model_config(model: GPTConfig, vocab_size: int) -> GPTConfig:
    """The `model` section with the vocabulary resolved from the tokenizer (nothing is allocated)."""
    if model.vocab_size is None:
        return dataclasses.replace(model, vocab_size=vocab_size)
    if model.vocab_size < vocab_size:
        raise ConfigError(
            f"model.vocab_size={model.vocab_size} is smaller than the tokenizer's vocabulary ({vocab_size})"
        )
    return model
