"""A study's records, made to travel: the folder a study writes can be committed to git and the study
continued from a clone on another machine.

* `.gitignore` (written into the study's folder at every start and stop): `git add <dir>` takes only
  the records: each ended run's run.json, summary.json, metrics.jsonl and the two files of `.hydra/`
  the resume and mltrain-compare read (config.yaml, overrides.yaml); the study's study.json,
  environment.json, selection files, verdicts and ladder report. Never weights (model.safetensors,
  model.json), checkpoints, logs, locks, Hydra's hydra.yaml / multirun.yaml (absolute paths of this
  machine) or W&B folders; a run that has not ended is left out whole (on a clone it starts again).
* `check_environment`: before any run, every run already in the folder must have been made where its
  must-be-equal values (mltrain/runs/environment.py MUST_EQUAL) equal this machine's (code, versions,
  threads, device) and each other's (corpus, held-out set); the first that differs is refused in one
  line naming the value, the run and both values, unless the study's `allow_env_change` names it.
* `write_environment`: `environment.json`, the study's record of the machines its runs ran on (runs and
  seconds per machine: wall-clock figures are per machine, never compared across) and of the changes
  accepted by `allow_env_change`.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from mltrain.core import guarded
from mltrain.core.errors import ConfigError
from mltrain.runs import environment
from mltrain.runs.environment import MUST_EQUAL
from mltrain.tools.study.plan import EVAL, TUNE, Layout
from mltrain.tools.study.progress import ended, measured, run_status
from mltrain.tools.study.schema import StudyConfig

if TYPE_CHECKING:  # the training stack is imported when a run config is made, not with this module
    from mltrain.config import Config

ENVIRONMENT = "environment.json"
KEPT = ["/study.json", f"/{ENVIRONMENT}", "/ladder.md", "/ladder.json", "/ladder.png", "/*/selection.json",
        "/*/.selection.basis.json", "/*/verdict/comparison.md", "/*/verdict/comparison.json",
        "/*/verdict/comparison.png", *(f"/*/*/*/*/{name}" for name in (
            "run.json", "summary.json", "metrics.jsonl", ".hydra/config.yaml", ".hydra/overrides.yaml"))]
HEAD = ("# Written by mltrain-study at every start and stop and before each batch of runs: `git add` of\n"
        "# this folder takes the study's records only (docs/studies.md, records that travel): never weights,\n"
        "# checkpoints, logs or W&B folders, and no run that has not ended.\n")


def run_dirs(root: Path) -> list[Path]:
    """Every run folder below a study's folder (<scale>/<stage>/<arm>/<run>)."""
    return sorted(d for stage in (TUNE, EVAL) for d in root.glob(f"*/{stage}/*/*")
                  if d.is_dir() and not d.is_symlink())


def _escaped(part: str) -> str:
    """A folder name as a literal .gitignore pattern (its glob characters and a leading '#' or '!' escaped)."""
    return re.sub(r"([\\*?\[\]!# ])", r"\\\1", part)


def gitignore_text(root: Path, launching: Iterable[Path] = ()) -> str:
    """The records folder's .gitignore; `launching`: run folders about to start (listed as not ended before
    they exist, so records committed while they train leave them out)."""
    unfinished = sorted({*(d for d in run_dirs(root) if not ended(run_status(d))), *launching})
    lines = [HEAD + "*", "!*/", "!/.gitignore", *(f"!{p}" for p in KEPT), "checkpoints/", "wandb/"]
    if unfinished:
        lines.append("# runs that have not ended (left out until they do)")
        lines += ["/" + "/".join(_escaped(p) for p in d.relative_to(root).parts) + "/" for d in unfinished]
    return "\n".join(lines) + "\n"


def write_gitignore(root: Path, launching: Iterable[Path] = ()) -> None:
    guarded.write_text(root / ".gitignore", gitignore_text(root, launching), root=root)


# ---------------------------------------------------------------------------------------------
# The environment a continuation must equal


def check_allowed(allowed: Iterable[str]) -> None:
    unknown = [a for a in allowed if a not in MUST_EQUAL]
    if unknown:
        raise ConfigError(f"allow_env_change={list(allowed)}: {unknown[0]!r} is not a value a continuation must "
                          f"equal ({', '.join(MUST_EQUAL)})")


def here(study: StudyConfig, run_cfg: Optional[Config]) -> dict:
    """This machine's must-be-equal values for the study's runs (`run_cfg`: one of their typed configs):
    code, versions, threads (where the launcher's environment or the basic launcher fixes them), device."""
    import os
    import platform

    import numpy
    import torch

    values: dict[str, str | int] = {"code": environment.code_digest(), "python": platform.python_version(), "torch": torch.__version__,
              "numpy": numpy.__version__}
    threads = study.launcher.env.get("OMP_NUM_THREADS") or (
        os.environ.get("OMP_NUM_THREADS") if study.launcher.name == "basic" else None)
    if threads is not None and str(threads).isdigit():
        values["threads"] = int(threads)
    elif study.launcher.name == "basic":
        values["threads"] = torch.get_num_threads()
    if run_cfg is None:
        return values
    device = str(run_cfg.device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return values  # the run itself refuses a GPU that is not here
    values["device"] = environment.device_label(torch.device(device))
    return values


def _short(value: Any) -> str:
    text = str(value)
    return text[:16] + "…" if len(text) > 20 and re.fullmatch(r"[0-9a-f]+", text) else text


def _group(root: Path, run: Path, summary: dict, key: str) -> tuple:
    """Runs whose corpus (held-out set) must be the same: those of one scale (and held-out size)."""
    scale = run.relative_to(root).parts[0]
    held = summary.get("held_out")
    held = held if isinstance(held, dict) else {}
    return (scale,) if key == "corpus" else (scale, held.get("sequences"), held.get("tokens"))


def check_environment(study: StudyConfig, layout: Layout, run_cfg: Optional[Config]) -> dict[str, list[str]]:
    """ConfigError (one line) for the first run in the study's folder made where a must-be-equal value
    differs from this machine's or from the other runs' (corpus, held-out set); returns the accepted
    changes (value -> the values seen, this machine's last) that `allow_env_change` let through."""
    check_allowed(study.allow_env_change)
    mine, root = here(study, run_cfg), layout.root
    records = [(d, s) for d in run_dirs(root) if (s := run_status(d)) is not None]
    accepted: dict[str, list[str]] = {}
    for key in MUST_EQUAL:
        seen = [(d, environment.recorded(s)[key], s) for d, s in records if key in environment.recorded(s)]
        if key in mine:
            expected = {(): mine[key]}
        else:  # compared among the runs: the value most of a group's runs have
            groups: dict[tuple, Counter] = {}
            for d, value, s in seen:
                groups.setdefault(_group(root, d, s, key), Counter())[str(value)] += 1
            expected = {g: c.most_common(1)[0][0] for g, c in groups.items()}
        for d, value, s in seen:
            want = expected.get(()) if key in mine else expected[_group(root, d, s, key)]
            if str(value) == str(want):
                continue
            if key in study.allow_env_change:
                accepted.setdefault(key, [])
                for v in (str(value), str(want)):
                    if v not in accepted[key]:
                        accepted[key].append(v)
                continue
            where = "here it is" if key in mine else "the study's other runs have"
            raise ConfigError(
                f"{d.relative_to(root)} was made with {key} {_short(value)}; {where} {_short(want)}: a study "
                f"continues only where its runs' {key} is the same (docs/studies.md); run it there, or accept the "
                f"change with allow_env_change=[{key}] (the study's reports then say so)")
    return accepted


def write_environment(layout: Layout, accepted: dict[str, list[str]]) -> None:
    """environment.json: per machine its CPU, device and versions, its runs and their seconds; the changes
    `allow_env_change` accepted."""
    machines: dict[str, dict] = {}
    for d in run_dirs(layout.root):
        summary = run_status(d)
        env = (summary or {}).get("environment")
        if not ended(summary) or not isinstance(env, dict):
            continue
        m = machines.setdefault(str(env.get("machine_id")), {
            "cpu_model": env.get("cpu_model"), "cpu_flags": env.get("cpu_flags"), "device": env.get("device"),
            "threads": env.get("threads"), "torch": env.get("torch"), "runs": 0, "run_seconds": 0.0})
        m["runs"] += 1
        taken = measured(summary)
        m["run_seconds"] = round(m["run_seconds"] + (taken[0] if taken else 0.0), 3)
    record = {"machines": machines, "accepted_changes": accepted,
              "note": "seconds are per machine: wall-clock figures are not compared across machines"}
    guarded.write_json(layout.root / ENVIRONMENT, record, root=layout.root, indent=2)


def accepted_sentence(accepted: dict[str, list[str]]) -> Optional[str]:
    """The line the reports carry when `allow_env_change` let runs of another environment in."""
    if not accepted:
        return None
    parts = [f"{key} ({', '.join(_short(v) for v in values)})" for key, values in accepted.items()]
    return ("mltrain-study: runs made in another environment were accepted (allow_env_change): "
            + "; ".join(parts) + f"; see {ENVIRONMENT}")
