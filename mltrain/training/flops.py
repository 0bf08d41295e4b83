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
model that actually ran, so the cost of a coarse step comes out of the same formula.
"""

from __future__ import annotations

import re
from typing import Optional

import torch

FLOPS_FORMULA = "6N+12LTd"  # short name written to summary.json


def forward_flops_per_token(n_blocks: int, n_embd: int, vocab_size: int, seq_len: int) -> float:
    d = n_embd
    matmul_params = n_blocks * 12 * d * d + vocab_size * d
    return 2.0 * matmul_params + 4.0 * n_blocks * seq_len * d


def train_flops_per_token(n_blocks: int, n_embd: int, vocab_size: int, seq_len: int) -> float:
    """Forward + backward (backward ≈ 2 × forward): the paper's '3 forward passes per step'."""
    return 3.0 * forward_flops_per_token(n_blocks, n_embd, vocab_size, seq_len)


def train_flops_per_step(n_blocks: int, n_embd: int, vocab_size: int, seq_len: int, batch_size: int) -> float:
    return train_flops_per_token(n_blocks, n_embd, vocab_size, seq_len) * batch_size * seq_len


# Dense bf16 peak (no sparsity) of each accelerator, for MFU, by the name torch reports, most specific
# first: a PCIe or NVL card is slower than the SXM part of the same name (vendors' datasheets; the
# GeForce and workstation cards' figures are with fp32 accumulation, which PyTorch's bf16 matmuls use).
# Unknown devices (and CPUs) report no MFU unless train.peak_flops says their peak.
_PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    (r"GB200", 2.5e15),
    (r"B200", 2.25e15),
    (r"B100", 1.75e15),
    (r"GH200", 989e12),
    (r"H200.*NVL", 835e12),
    (r"H200", 989e12),  # SXM (torch names it plainly "NVIDIA H200")
    (r"H100.*NVL", 835e12),
    (r"H100.*PCIE", 756e12),
    (r"H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    (r"H800.*PCIE", 756e12),
    (r"H800", 989e12),
    (r"\bH20\b", 148e12),
    (r"A100", 312e12),  # SXM and PCIe alike
    (r"A800", 312e12),
    (r"L40S", 362e12),
    (r"\bL40\b", 181e12),
    (r"\bL4\b", 121e12),
    (r"RTX 6000 ADA", 364e12),
    (r"RTX A6000", 155e12),
    (r"\bA40\b", 150e12),
    (r"\bA10\b", 125e12),
    (r"RTX 4090", 165e12),
    (r"RTX 3090", 71e12),
)


def peak_for_name(name: str) -> Optional[float]:
    """The dense bf16 peak (FLOP/s) of the device torch names `name`, or None if not in the table."""
    upper = name.upper()
    for pattern, value in _PEAK_BF16_FLOPS:
        if re.search(pattern, upper):
            return value
    return None


def peak_flops(device: torch.device, override: Optional[float] = None) -> Optional[float]:
    """FLOP/s one device can do: train.peak_flops when set, else the table's bf16 peak of a CUDA device."""
    if override:
        return float(override)
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))


class SteadyRate:
    """Training FLOPs and time of the train rows measured without a compile in them, per level: the
    steady-state rate a summary's MFU is taken from."""

    def __init__(self) -> None:
        self.flops: dict[int, float] = {}
        self.seconds: dict[int, float] = {}

    def add(self, level: int, flops: float, seconds: float) -> None:
        self.flops[level] = self.flops.get(level, 0.0) + flops
        self.seconds[level] = self.seconds.get(level, 0.0) + seconds

    def mfu(self, peak: Optional[float]) -> dict[str, float]:
        """{level: FLOPs per second / peak} (levels as strings, as JSON keeps them); empty without a peak."""
        if not peak:
            return {}
        return {str(level): self.flops[level] / self.seconds[level] / peak
                for level in sorted(self.flops) if self.seconds[level] > 0}
