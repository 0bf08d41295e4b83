"""FLOP accounting, in one place.

Convention ("6N+12LTd", as in PaLM / Chinchilla, and the paper's "3 forward passes per step"):
training FLOPs per token = 3 × forward FLOPs per token, where the forward pass costs

    2 · N_matmul            every weight used in a matmul does one multiply-add per token
  + 4 · n_blocks · T · d    attention scores QKᵀ and the weighted sum AV, counted over the full
                            T×T matrix (what dense kernels and FlopCounterMode count; causal
                            masking is not subtracted)

with N_matmul = n_blocks · 12·d² (qkv 3d², out d², MLP 8d²; + biases' negligible adds are ignored)
plus the head V·d (tied to the embedding, but the head matmul is real work; the embedding lookup is
not). Norms, softmax, GELU and the loss are elementwise and ignored, as in the usual convention.

The head matters for coarse models: gpt22m's head (50257×256) is as large as 16 of its blocks, so a
6-block coarse model costs ~0.77× a 12-block fine step, not 0.5×. Everything here is a function of the
model that actually ran, so the cost of a coarse step comes out of the same formula. Plain arithmetic
(no torch): the plan uses it for the schedule control's step counts. A device's peak, for MFU, is
mltrain/training/devices.py peak_flops.
"""

from __future__ import annotations

FLOPS_FORMULA = "6N+12LTd"  # short name written to summary.json


def forward_flops_per_token(n_blocks: float, n_embd: int, vocab_size: int, seq_len: int) -> float:
    d = n_embd
    matmul_params = n_blocks * 12 * d * d + vocab_size * d
    return 2.0 * matmul_params + 4.0 * n_blocks * seq_len * d


def train_flops_per_token(n_blocks: float, n_embd: int, vocab_size: int, seq_len: int) -> float:
    """Forward + backward (backward ≈ 2 × forward): the paper's '3 forward passes per step'."""
    return 3.0 * forward_flops_per_token(n_blocks, n_embd, vocab_size, seq_len)


def train_flops_per_step(n_blocks: int, n_embd: int, vocab_size: int, seq_len: int, batch_size: int) -> float:
    return train_flops_per_token(n_blocks, n_embd, vocab_size, seq_len) * batch_size * seq_len
