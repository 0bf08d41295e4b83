"""Range checks that a type cannot make, each raising the one-line ConfigError that names the key: the
schema's validate() (mltrain/config.py) and the depth methods' own checks (mltrain/method/) share them.
"""

from __future__ import annotations

from typing import Any

from mltrain.core.errors import ConfigError


def positive(value: Any, key: str, zero_ok: bool = False) -> None:
    if value is None or not (value >= 0 if zero_ok else value > 0):  # `not`: NaN fails too
        raise ConfigError(f"{key}={value} must be {'>= 0' if zero_ok else '> 0'}")


def check_optim(o: Any, key: str) -> None:
    """An optimizer's settings (`optim`, or the coarse levels' resolved ones)."""
    positive(o.lr, f"{key}.lr")
    positive(o.weight_decay, f"{key}.weight_decay", zero_ok=True)
    positive(o.eps, f"{key}.eps")
    if not 0.0 <= o.momentum < 1.0:
        raise ConfigError(f"{key}.momentum={o.momentum} must be in [0, 1)")
    if o.nesterov and o.momentum == 0:
        raise ConfigError(f"{key}.nesterov=true needs {key}.momentum > 0")
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        raise ConfigError(f"{key}.betas={list(o.betas)} must be two numbers in [0, 1)")


def check_schedule(s: Any, key: str, peak_lr: float) -> None:
    """An LR schedule's settings, against the peak LR it starts from."""
    positive(s.warmup_steps, f"{key}.warmup_steps", zero_ok=True)
    if not 0.0 <= s.min_lr <= peak_lr:
        raise ConfigError(f"{key}.min_lr={s.min_lr} must be in [0, peak lr={peak_lr}]")
