"""Where a run came from: code version, library versions, device and command line; and secrets kept out.

Written into summary.json and the W&B config, so a number in a report can be traced to the code and
the machine that produced it.

Secrets never land in a record: the value of a secret-looking key (an API key, a token, a password:
`+hydra.job.env_set.WANDB_API_KEY=...`, `HF_TOKEN=...`) is replaced by `<redacted>` wherever mltrain
records a command line or a config: summary.json, Hydra's `.hydra/*.yaml` and `multirun.yaml`
(rewritten right after Hydra writes them), the W&B config and the command line W&B records.
"""

from __future__ import annotations

import contextlib
import platform
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Optional

from mltrain.runs.keys import split_override

PACKAGE_DIR = Path(__file__).resolve().parent
REDACTED = "<redacted>"
# Words that make a key secret: as a whole part of a key (`hydra.job.env_set.HF_TOKEN`, `api_key`), or
# anywhere inside an upper-case name (`MYTOKEN`, `DB_PASSWORD2`). `data.tokenizer` is not one.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                "KEY", "AUTH", "COOKIE", "SESSION")
_PARTS = re.compile(r"[._\-/@+~\s]+")


def is_secret_key(key: str) -> bool:
    """Whether a config key or environment variable name looks like it holds a secret."""
    last = str(key).strip().lstrip("+~").rsplit(".", 1)[-1]
    parts = [p for p in _PARTS.split(last) if p]
    if any(p.upper() in SECRET_WORDS for p in parts):
        return True
    return last.isupper() and any(w in last for w in SECRET_WORDS if w not in ("KEY", "AUTH", "SESSION"))


def secret_override(override: str) -> bool:
    """Whether a `key=value` override (or command-line word) sets a secret-looking key."""
    key, value = split_override(override)
    if value is None:
        return False
    if is_secret_key(key):
        return True
    # a whole mapping at once: +hydra.job.env_set={WANDB_API_KEY:...}
    return value.lstrip().startswith("{") and any(is_secret_key(k) for k in re.findall(r"([\w.]+)\s*:", value))


def redact_override(override: str) -> str:
    return f"{split_override(override)[0]}={REDACTED}" if secret_override(override) else str(override)


def redact_tree(node: Any, key: str = "") -> Any:
    """A copy of a config tree (dicts, lists, strings) with every secret value replaced."""
    if isinstance(node, dict):
        return {k: REDACTED if is_secret_key(str(k)) and v is not None else redact_tree(v, str(k))
                for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [redact_tree(v, key) for v in node]
    if isinstance(node, str):
        return redact_override(node)
    return node


def redact_argv(argv: list[str]) -> list[str]:
    return [redact_override(a) for a in argv]


@contextlib.contextmanager
def redacted_argv() -> Iterator[None]:
    """sys.argv without secret values while a library records it (W&B keeps the command line)."""
    saved = sys.argv
    sys.argv = redact_argv(list(saved))
    try:
        yield
    finally:
        sys.argv = saved


def redact_yaml_files(paths: list[Path]) -> None:
    """Rewrite each YAML file of `paths` (Hydra's records) with secret values replaced; a file without
    any is left as it is (byte for byte), a missing one is skipped."""
    from omegaconf import OmegaConf

    from mltrain.atomic import atomic_open

    for path in paths:
        if not path.is_file() or path.is_symlink() or not _may_hold_secrets(path.read_text(encoding="utf-8")):
            continue
        tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        clean = redact_tree(tree)
        if clean != tree:
            with atomic_open(path, "w") as f:
                f.write(OmegaConf.to_yaml(OmegaConf.create(clean)))


def _may_hold_secrets(text: str) -> bool:
    """False when `text`, read by libyaml, is a tree without a secret value (a file Hydra wrote for a job
    is read in ~1 ms this way, 20 times faster than OmegaConf reads it); True when it holds one, or when
    libyaml cannot tell (OmegaConf's reading then decides)."""
    import yaml

    try:
        tree = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return True
    return redact_tree(tree) != tree


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


def device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()})"


def provenance(device: Any, argv: Optional[list[str]] = None) -> dict:
    import torch

    argv = redact_argv(sys.argv if argv is None else argv)
    return {
        "git": git_commit(),
        "mltrain_version": _version("mltrain"),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "device_name": device_name(device),
        "command": " ".join(shlex.quote(a) for a in [Path(argv[0]).name, *argv[1:]]) if argv else None,
    }


def redact_hydra_records(config: Any) -> None:
    """Redact the files Hydra has just written for this job: `.hydra/hydra.yaml` and `overrides.yaml`
    (the run's config.yaml holds mltrain's keys only), and the sweep's `multirun.yaml`."""
    from hydra.types import RunMode

    files = []
    if config.hydra.output_subdir is not None:
        records = Path(config.hydra.runtime.output_dir) / str(config.hydra.output_subdir)
        files += [records / "hydra.yaml", records / "overrides.yaml"]
    if config.hydra.mode == RunMode.MULTIRUN:
        files.append(Path(config.hydra.sweep.dir) / "multirun.yaml")
    redact_yaml_files(files)
