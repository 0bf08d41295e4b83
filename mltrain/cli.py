"""Console entry points. Each is a thin shell: Hydra (or argparse) parses, the named module does the work."""

from __future__ import annotations

import hashlib
import logging
import sys

from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from mltrain.config import ConfigError, register_configs

log = logging.getLogger("mltrain")

# The YAML tree ships inside the package as `mltrain.conf` (mapped from the top-level conf/ folder in
# pyproject.toml), so the same path works from a checkout, an editable install and a wheel.
CONFIG_PATH = "pkg://mltrain.conf"

register_configs()

MAX_DIRNAME = 200


def short_dirname(name: str) -> str:
    """A job directory name: the overrides as Hydra joins them, cut with a hash past MAX_DIRNAME
    characters (file systems refuse names over 255 bytes)."""
    if len(name) <= MAX_DIRNAME:
        return name or "default"
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_DIRNAME - 11]}~{digest}"


OmegaConf.register_new_resolver("mltrain_dirname", short_dirname, replace=True)


class RunGuard(Callback):
    """Checks that run before Hydra creates or writes the output directory.

    A single run into a directory that already holds a run would have its `.hydra/` files overwritten
    before the task starts, so refuse it here; and reject a config that cannot run (ConfigError) before
    anything is written. Either is one error line and exit status 2.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from mltrain.run import existing_run

        found = existing_run(Path(config.hydra.run.dir))
        if found is not None:
            _fail(f"{found} exists: hydra.run.dir={config.hydra.run.dir} holds an earlier run; "
                  "choose another hydra.run.dir (nothing was changed)")
        self._validate(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        if sweep.is_dir() and any(sweep.rglob("summary.json")):
            _fail(f"hydra.sweep.dir={sweep} holds earlier runs; choose another (nothing was changed)")

    @staticmethod
    def _validate(config: DictConfig) -> None:
        from mltrain.config import validate

        try:
            validate(config)
        except ConfigError as err:
            _fail(str(err))


def _fail(message: str) -> None:
    print(f"mltrain: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def _train(cfg: DictConfig) -> float | None:
    from mltrain.data import DataError
    from mltrain.run import run

    try:
        return run(cfg)
    except (ConfigError, DataError) as err:
        # Known bad input: one clear line, no traceback, non-zero exit (a multirun stops here too).
        log.error("%s", err)
        _fail(str(err))


def train_main() -> None:
    _train()


def prepare_main() -> None:
    from mltrain.data.prepare import hydra_main

    hydra_main()


def compare_main(argv: list[str] | None = None) -> None:
    from mltrain.compare import main

    sys.exit(main(argv))
if __name__ == "__main__":
    train_main()
