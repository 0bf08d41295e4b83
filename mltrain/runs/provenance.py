"""Where a run came from: code version, library versions, device and command line; and secrets kept out.

Written into summary.json and the W&B config, so a number in a report can be traced to the code and
the machine that produced it.

Secrets never land in a record, judged by the name that holds them and by the shape of the value:

* a secret-looking name (`is_secret_key`): a key or environment variable named with a word such as
  TOKEN, SECRET, PASSWORD, PASS, PWD, PAT, KEY, AUTH, CREDENTIAL, COOKIE, SESSION, DSN, JWT, WEBHOOK,
  PRIVATE, as a whole part of the name (`hydra.job.env_set.GITHUB_PAT`, `api_key`, `githubToken`) or,
  for the unambiguous ones, inside an upper-case name (`MYTOKEN`, `DB_PASSWORD2`): its whole value;
* a secret-shaped value (`SECRET_VALUES`), whatever the name: the token formats of GitHub (`ghp_`,
  `github_pat_`, ...), Hugging Face (`hf_`), OpenAI and Anthropic (`sk-`), Stripe, Slack (`xoxb-`, ...),
  AWS access key ids (`AKIA...`), GitLab (`glpat-`), Google, npm, PyPI, JSON web tokens, private key
  blocks, a `Bearer` token and the password of a URL (`https://user:PASSWORD@host`): that span of the value.

Each is replaced by `<redacted>` wherever mltrain records a command line or a config: summary.json,
Hydra's `.hydra/*.yaml` and `multirun.yaml` (rewritten right after Hydra writes them), the W&B config
and the command line W&B records, a study's study.json and the sweep lines of its log.
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
# Words that make a key secret as a whole part of its name (`hydra.job.env_set.HF_TOKEN`, `api_key`,
# `GITHUB_PAT`, `githubToken`); `data.tokenizer` and `PATH` are not one.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PASS", "PWD", "PAT", "CREDENTIAL",
                "CREDENTIALS", "CREDS", "APIKEY", "KEY", "AUTH", "AUTHORIZATION", "OAUTH", "BEARER", "COOKIE", "SESSION", "DSN",
                "JWT", "WEBHOOK", "PRIVATE")
# ... and those also found inside an upper-case name (`MYTOKEN`, `DB_PASSWORD2`): never a part of a
# harmless word (KEY is in KEYBOARD, PAT in PATH, PASS in BYPASS, PWD in OLDPWD).
INNER_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "OAUTH", "BEARER",
               "COOKIE", "JWT", "WEBHOOK")
LONE_HARMLESS = ("PWD",)  # the shell's working directory, when it is the whole name
_PARTS = re.compile(r"[._\-/@+~\s]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Token formats used in the wild, found anywhere in a value (each match is replaced, the rest kept).
SECRET_VALUES = re.compile("|".join((
    r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained personal access tokens
    r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"\bsk-[A-Za-z0-9_\-]{16,}",  # OpenAI (sk-proj-...), Anthropic (sk-ant-...)
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bglpat-[A-Za-z0-9_\-]{20,}",  # GitLab
    r"\bAIza[0-9A-Za-z_\-]{35}",  # Google API keys
    r"\bya29\.[0-9A-Za-z_\-]{20,}",  # Google OAuth access tokens
    r"\bnpm_[A-Za-z0-9]{36}",  # npm
    r"\bpypi-[A-Za-z0-9_\-]{50,}",  # PyPI
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JSON web tokens
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----",  # a private key block
    r"\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{16,}=*",  # an Authorization header's token
    r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # a URL's user:password
)))


def is_secret_key(key: str) -> bool:
    """Whether a config key or environment variable name looks like it holds a secret."""
    last = str(key).strip().lstrip("+~").rsplit(".", 1)[-1]
    parts = [p.upper() for p in _PARTS.split(_CAMEL.sub("_", last)) if p]
    if parts in ([w] for w in LONE_HARMLESS):
        return False
    if any(p in SECRET_WORDS for p in parts):
        return True
    return last.isupper() and any(w in last for w in INNER_WORDS)


def secret_value(text: str) -> bool:
    """Whether `text` holds a value of a known secret shape (SECRET_VALUES)."""
    return bool(SECRET_VALUES.search(str(text)))


def _secret_named(key: str, value: Optional[str]) -> bool:
    """Whether the override `key=value` sets a secret-looking key (or a mapping holding one at once:
    +hydra.job.env_set={WANDB_API_KEY:...})."""
    if value is None:
        return False
    return is_secret_key(key) or (value.lstrip().startswith("{") and
                                  any(is_secret_key(k) for k in re.findall(r"([\w.]+)\s*:", value)))


def secret_override(override: str) -> bool:
    """Whether a `key=value` override (or command-line word) sets a secret-looking key or holds a
    secret-shaped value."""
    return _secret_named(*split_override(override)) or secret_value(override)


def redact_override(override: str) -> str:
    """`key=<redacted>` for a secret-looking key; else the override with every secret-shaped span replaced."""
    key, value = split_override(override)
    if _secret_named(key, value):
        return f"{key}={REDACTED}"
    return SECRET_VALUES.sub(REDACTED, str(override))


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

    from mltrain.core.atomic import atomic_open

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
