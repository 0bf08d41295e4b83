"""The checks before a run touches anything, in one place: the config (config.validate) and, with
train.resume=true, the run dir's earlier run (training/resume.py check_resume). The CLI's RunGuard makes
them before Hydra writes into the run dir, and mltrain/run.py `run` when it is called without them.

No torch, here or in what this imports: a config refused by these checks (one `mltrain: error:` line,
exit status 2) never loads the training stack, which mltrain/run.py imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import OmegaConf

from mltrain.config import Config, resuming, validate
from mltrain.training.resume import PreviousRun, check_resume


@dataclass(frozen=True)
class Checked:
    """What `preflight` found: the config can run, and `previous` is the run dir's earlier run to
    continue (or, when `previous.ended`, to leave alone); None: a fresh start."""

    previous: Optional[PreviousRun]


def preflight(cfg: Config, run_dir: str | Path, as_written: Optional[Mapping[str, Any]] = None) -> Checked:
    """The checks before a run touches anything, in one place (the CLI's RunGuard and `run` both use
    it): the config (validate), and with train.resume=true the dir's earlier run (check_resume: one made
    with another config is refused, naming the keys). `as_written`: the config as composed, before its
    interpolations were resolved (the CLI hands it over, so that `${oc.env:...}` compares as written);
    None: `cfg`'s own values. Reads only; ConfigError for the first problem."""
    validate(cfg)
    if not resuming(cfg.train.resume):
        return Checked(None)
    asked = as_written if as_written is not None else OmegaConf.structured(cfg)
    return Checked(check_resume(run_dir, asked, type(cfg)))
