"""Numbers that pass a type but not common sense, checked in one place for runs and studies.

* `finite_number(key, value, ...)`: a number that is finite, in range, and names its key when it is not
  (`tokens_per_param=inf` is refused as itself, not as an OverflowError later).
* `check_env(env, where)`: environment values a run is given (a study's `launcher.env`): the name is a
  variable name, and a thread count (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, ...) is a whole number from
  1 to MAX_THREADS, as the libraries that read it need (`"0"` or `"abc"` would crash the first run, or
  be ignored by one library and not by another).
* `rate(device, threads)` and `duration_check(...)`: how long a run or a study takes at least on this
  machine, from its planned FLOPs at a rate no real run beats (NOMINAL_RATE: a CPU thread's fp32
  throughput, an accelerator's bf16 peak) and its steps at MIN_STEP_S each; beyond LONG_S it is refused
  unless the user consents (`train.allow_long=true`, a study's `allow_long=true`), beyond NOTE_S it is
  said first.

Torch-free and data-free: the callers give the FLOPs and the device.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional

from mltrain.core.errors import ConfigError

MAX_THREADS = 4096
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "NUMEXPR_MAX_THREADS", "VECLIB_MAXIMUM_THREADS", "TORCH_NUM_THREADS")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# FLOP/s no real training run exceeds here: fp32 on one CPU thread (AVX2/AVX-512 FMA at ~3 GHz, of
# which small matmuls reach far less), and a CUDA device's bf16 peak (mltrain/training/devices.py lists
# known ones; an unknown one is taken as this). An estimate from these is a lower bound on the time.
NOMINAL_RATE = {"cpu_thread": 5e10, "cuda": 1e15}
MIN_STEP_S = 1e-3  # no optimizer step of any model takes less (Python, kernel launches): tiny models' floor
NOTE_S = 3600.0  # an estimate above an hour is said before the first step
LONG_S = 24 * 3600.0  # above a day it needs consent


def finite_number(key: str, value: Any, low: float = 0.0, high: float = math.inf, low_ok: bool = False,
                  why: str = "") -> float:
    """`value` as a float; ConfigError naming `key` unless it is a finite number in (low, high]
    ([low, high] with `low_ok`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={value!r} must be a number")
    v = float(value)
    shown = f"{v:g}" if isinstance(value, float) else str(value)
    if not math.isfinite(v):
        raise ConfigError(f"{key}={shown} must be a finite number{why}")
    if not (v >= low if low_ok else v > low) or v > high:
        span = f"{'[' if low_ok else '('}{low:g}, {high:g}]"
        raise ConfigError(f"{key}={shown} must be in {span}{why}")
    return v


def check_env(env: Mapping[str, Any], where: str) -> None:
    """ConfigError naming `where.<NAME>` for an environment entry no process could use as given."""
    for name, value in env.items():
        key = f"{where}.{name}"
        if not _ENV_NAME.match(str(name)):
            raise ConfigError(f"{key}: {name!r} is not an environment variable name (letters, digits and _)")
        text = "" if value is None else str(value)
        if value is None or "\0" in text:
            raise ConfigError(f"{key}={value!r} must be a string without NUL characters")
        if name in THREAD_VARS:
            if not re.fullmatch(r"\s*\d+\s*", text) or not 1 <= int(text) <= MAX_THREADS:
                raise ConfigError(f"{key}={text!r} must be a whole number of threads from 1 to {MAX_THREADS} "
                                  f"(the libraries that read {name} take nothing else); nothing was started")


def rate(device: str, threads: int = 1, peak: Optional[float] = None) -> float:
    """The nominal FLOP/s of `device` ("cpu" with `threads` threads, or "cuda"; `peak`: a known peak)."""
    if device == "cpu":
        return NOMINAL_RATE["cpu_thread"] * max(1, threads)
    return peak or NOMINAL_RATE["cuda"]


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:,.1f} days"


def duration_check(what: str, flops: float, flop_rate: float, where: str, consent_key: str,
                   consented: bool, steps: float = 0) -> Optional[str]:
    """None for a short job; the line to say first for one longer than NOTE_S; ConfigError for one
    longer than LONG_S without consent. `what` names it ("this run"), `where` the machine ("cpu, 2
    threads"); its time is at least its FLOPs at `flop_rate`, and at least MIN_STEP_S per step."""
    if not math.isfinite(flops) or flops <= 0 or flop_rate <= 0:
        return None
    seconds = max(flops / flop_rate, steps * MIN_STEP_S)
    said = (f"{what} needs {flops:.2g} FLOPs in {steps:,.0f} steps: at least {duration_text(seconds)} on {where} "
            f"(at {flop_rate:.2g} FLOP/s and {MIN_STEP_S * 1e3:g} ms a step, faster than any run here)")
    if seconds > LONG_S and not consented:
        raise ConfigError(f"{said}, more than this machine should be given without asking: add {consent_key}=true "
                          f"to start it anyway, or make it smaller; nothing was started")
    return said if seconds > NOTE_S else None
