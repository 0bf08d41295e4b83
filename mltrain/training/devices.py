"""Which device and precision this process trains with, and the device's peak FLOPs (for MFU).

- One process: `device=auto` is the first GPU when there is one, else the CPU.
- Data parallel (torchrun, SLURM tasks): rank r on a node trains on GPU LOCAL_RANK (or on the only GPU
  it sees, where the launcher binds one GPU per task).
- Parallel sweep jobs on one machine (`hydra/launcher=local`, joblib): each *worker process* claims one
  GPU of CUDA_VISIBLE_DEVICES (all GPUs when unset) for its whole life and makes it the only one CUDA
  sees. A claim per worker, not a device per job number: joblib (loky) reuses worker processes and
  starts a job whenever a worker is free, so job numbers modulo the GPU count can put two running jobs
  on one GPU, and a worker whose CUDA is initialised cannot change CUDA_VISIBLE_DEVICES any more. The
  claim is an exclusive `flock` on a lock file per GPU in the sweep dir, which the kernel releases
  when the worker exits. With more workers than GPUs, the extra workers share round-robin by job
  number (with a warning).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from pathlib import Path
from typing import Optional

import torch

from mltrain.training.distributed import World
from mltrain.core.errors import ConfigError
from mltrain.core.atomic import open_no_follow

log = logging.getLogger("mltrain")


def resolve_device(name: str, world: World = World()) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but torch sees no CUDA device (use device=auto or device=cpu)")
    if name != "cuda" or not world.distributed:
        return torch.device(name)
    n = torch.cuda.device_count()
    if world.local_rank < n:
        index = world.local_rank
    elif n == 1:  # the launcher bound one GPU to each task
        index = 0
    else:
        raise ConfigError(f"rank {world.rank} has local rank {world.local_rank} but sees {n} GPUs: start at most "
                          f"one process per GPU (torchrun --nproc_per_node={n})")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def resolve_dtype(name: str, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype, or None for plain fp32."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return torch.bfloat16 if name == "bfloat16" else None


def enable_tf32(device: torch.device) -> None:
    """TF32 for the fp32 matmuls and convolutions that autocast leaves in fp32 (Ampere and later)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


# ---------------------------------------------------------------------------------------------
# One GPU per parallel sweep worker

_claimed: Optional[str] = None  # this process's GPU, once claimed (kept for the process's life)
_lock_fds: list[int] = []  # open lock files: the claim lasts while they are open


def gpu_pool() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries (indices or UUIDs), else all.

    torch.cuda.device_count() asks NVML and does not initialise CUDA, so a later claim still works."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def sweep_placement() -> Optional[str]:
    """In a job of the local (joblib) launcher: this worker's GPU (claimed on its first job). Other
    launchers place jobs themselves (SLURM gives each job its own GPUs), single runs use the default."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN or "joblib" not in str(hc.launcher.get("_target_", "")):
        return None
    gpu = claim_sweep_gpu(Path(hc.sweep.dir) / ".gpu_locks", hc.job.num)
    if gpu is not None:
        log.info("sweep job #%d trains on GPU %s (worker pid %d, CUDA_VISIBLE_DEVICES=%s)", hc.job.num, gpu,
                 os.getpid(), os.environ["CUDA_VISIBLE_DEVICES"])
    return gpu


def claim_sweep_gpu(lock_dir: Path, job_num: int) -> Optional[str]:
    """Give this worker process one GPU of the pool for its whole life (see the module docstring).

    Returns the GPU's CUDA_VISIBLE_DEVICES entry, or None when there is nothing to choose (one GPU or
    none). Must run before CUDA is initialised in this process; a worker that already claimed keeps
    its GPU for every later job."""
    global _claimed
    if _claimed is not None:
        return _claimed
    pool = gpu_pool()
    if len(pool) <= 1:
        return None
    if torch.cuda.is_initialized():
        log.warning("CUDA was initialised before this sweep job chose its GPU: it uses the default one")
        return None
    lock_dir.mkdir(parents=True, exist_ok=True)
    for gpu in pool:
        fd = open_no_follow(lock_dir / f"gpu-{gpu}.lock", os.O_CREAT | os.O_RDWR, 0o644)  # never through a link
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _lock_fds.append(fd)
        _claimed = gpu
        break
    else:
        _claimed = pool[job_num % len(pool)]
        log.warning("more parallel sweep jobs than GPUs (%d): job #%d shares GPU %s", len(pool), job_num, _claimed)
    os.environ["CUDA_VISIBLE_DEVICES"] = _claimed
    return _claimed


# ---------------------------------------------------------------------------------------------
# Peak FLOPs, for MFU

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
