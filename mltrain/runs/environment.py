"""Where a run ran, as its summary.json records it (`environment`), and which of it must be equal for a
study (or a run) to be continued elsewhere.

Must be equal (MUST_EQUAL), else a continuation measures another experiment:

    code       sha256 of the source mltrain runs (every .py of the package and every .yaml of its
               conf/), not the git commit: committing a study's records into the same repository
               moves the commit, not the code. The commit and its `dirty` flag are recorded beside it.
    python, torch, numpy   versions
    threads    torch's intra-op threads of the run
    device     `cpu`, or the GPU's name
    corpus     summary.json's corpus.sha256 (where the data loader records it)
    held_out   summary.json's held_out.fingerprint

For the reader only (a figure in seconds is this machine's): the CPU model and the flags torch's kernels
choose by, a machine id (a digest of /etc/machine-id, never the id itself), the load average at the
run's start and end. Imports torch only where a value needs it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any, Optional

MUST_EQUAL = ("code", "python", "torch", "numpy", "threads", "device", "corpus", "held_out")
# The CPU flags torch's kernels dispatch on (the full list is ~1.5 KB per run and says nothing more).
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of mltrain's source as installed: each .py of the package and each .yaml of its conf/,
    by path relative to its root and content (no __pycache__, no build leftovers)."""
    import mltrain
    import mltrain.conf

    h = hashlib.sha256()
    for root, pattern in ((Path(mltrain.__file__).parent, "*.py"), (Path(mltrain.conf.__file__).parent, "*.yaml")):
        for path in sorted(root.rglob(pattern)):
            if "__pycache__" in path.parts or path.is_symlink():
                continue
            h.update(f"{root.name}/{path.relative_to(root).as_posix()}".encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def machine_id() -> str:
    """A stable id of this machine that does not give its /etc/machine-id away (12 hex digits)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw:
            return hashlib.sha256(b"mltrain-machine:" + raw.encode()).hexdigest()[:12]
    return hashlib.sha256(b"mltrain-host:" + socket.gethostname().encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def cpu() -> dict:
    """{"model": the CPU's name, "flags": the KERNEL_FLAGS it has}, from /proc/cpuinfo where there is one."""
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and value.strip():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return {"model": model, "flags": [f for f in KERNEL_FLAGS if f in flags]}


def load() -> Optional[list[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def device_label(device: Any) -> str:
    """`cpu` (or the device type), or the GPU's name: what `device` must equal."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return getattr(device, "type", str(device))


def capture(device: Any, threads: Optional[int] = None) -> dict:
    """This process's environment for a run on `device` (a torch.device or its name); the load now is
    `load_start` (a run adds `load_end` when it ends: `ended`)."""
    import numpy
    import torch

    from mltrain.runs.provenance import git_commit

    git = git_commit() or {}
    return {"code": code_digest(), "commit": git.get("commit"), "dirty": git.get("dirty"),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "threads": int(threads if threads is not None else torch.get_num_threads()),
            "device": device_label(device), "cpu_model": cpu()["model"], "cpu_flags": cpu()["flags"],
            "machine_id": machine_id(), "load_start": load()}


def ended(env: dict) -> dict:
    return {**env, "load_end": load()}


def recorded(summary: dict) -> dict:
    """The must-be-equal values a summary.json records (a key absent where the run did not record it)."""
    env = summary.get("environment")
    env = env if isinstance(env, dict) else {}
    values = {k: env[k] for k in MUST_EQUAL if k in env}
    corpus, held = summary.get("corpus"), summary.get("held_out")
    if isinstance(corpus, dict) and corpus.get("sha256") is not None:
        values["corpus"] = corpus["sha256"]
    if isinstance(held, dict) and held.get("fingerprint") is not None:
        values["held_out"] = held["fingerprint"]
    return values


def same_machine(summary: dict) -> bool:
    """Whether a run's summary says it ran on this machine (one without an environment did not say)."""
    env = summary.get("environment")
    return isinstance(env, dict) and env.get("machine_id") == machine_id()


ALLOW_VARIABLE = "MLTRAIN_ALLOW_ENV_CHANGE"  # comma-separated MUST_EQUAL names a resume may differ in


def check_resume(summary: dict, run_dir: Any, threads: int) -> None:
    """ConfigError (one line) when the interrupted run in `run_dir` (its summary.json) was made where code,
    Python, torch, numpy or the thread count differ from this process's, unless $MLTRAIN_ALLOW_ENV_CHANGE
    names the value (a study sets it from its allow_env_change)."""
    import numpy
    import torch

    from mltrain.core.errors import ConfigError

    mine = {"code": code_digest(), "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "threads": int(threads)}
    allowed = {a.strip() for a in os.environ.get(ALLOW_VARIABLE, "").split(",")}
    there = recorded(summary)
    for key, value in mine.items():
        if key in there and str(there[key]) != str(value) and key not in allowed:
            raise ConfigError(f"{run_dir} holds a run made with {key} {there[key]}; here it is {value}: a run "
                              f"continues only where its {key} is the same; run it there, or accept the change with "
                              f"{ALLOW_VARIABLE}={key} (nothing was changed)")
