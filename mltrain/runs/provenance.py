"""Where a run came from: code version, library versions, device and command line.

Written into summary.json and the W&B config, so a number in a report can be traced to the code and
the machine that produced it.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional

import torch

PACKAGE_DIR = Path(__file__).resolve().parent


def git_commit(where: Path = PACKAGE_DIR) -> Optional[dict]:
    """The commit of the git checkout mltrain runs from, and whether it has uncommitted changes; None
    for an installed wheel, or without git."""
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()})"


def provenance(device: torch.device, argv: Optional[list[str]] = None) -> dict:
    argv = sys.argv if argv is None else argv
    return {
        "git": git_commit(),
        "mltrain_version": _version("mltrain"),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "device_name": device_name(device),
        "command": " ".join(shlex.quote(a) for a in [Path(argv[0]).name, *argv[1:]]) if argv else None,
    }
