"""Plugins: modules of the user's own, imported before the schema is built, that register what mltrain
lets a module add: a depth method with its own keys (registry.py `@register_method`, its `Config`), a
coarsening scheme (coarsening.py `@register_scheme`), a train-row metric (training/rows.py `@row_metric`),
a study axis (tools/study/axes.py `@ladder_axis`).

They are named by module (`my_pkg.my_method`, a file `my_method.py` in the current folder, or one on the
Python path) in two places, read before Hydra composes anything:

    mltrain plugins=[my_method] experiment=mine mine.k=3       the command line (`mltrain`, `-m` sweeps,
                                                               `mltrain-study`)
    MLTRAIN_PLUGINS=my_method,other mltrain ...               the environment (a comma list)

`load` imports each one once, the current folder first on the path (as `python -m` has it), and adds
its name to MLTRAIN_PLUGINS in this process's environment: every process started from it (a sweep's
workers, a study's runs) imports the same plugins. A name in a config file is read too late (the schema
is built by then): mltrain/config.py validate() refuses one that was not imported.

Torch-free itself; a plugin may import what it needs (a phase handler imports torch).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Iterable

from mltrain.core.errors import ConfigError

PLUGINS_ENV = "MLTRAIN_PLUGINS"
KEY = "plugins"
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_LOADED: list[str] = []


def loaded() -> list[str]:
    """The plugins imported in this process, in the order they were."""
    return list(_LOADED)


def from_env() -> list[str]:
    """The module names MLTRAIN_PLUGINS lists (a comma list; blanks ignored)."""
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    inner = getattr(value, "list", None)  # a sweep over lists: plugins=[a],[a,b]
    return _strings(list(inner)) if inner is not None else []


def from_overrides(overrides: Iterable[str]) -> list[str]:
    """The module names `plugins=[...]` (or `+plugins=`, a sweep of lists) lists among Hydra overrides;
    an override Hydra cannot parse is left to Hydra, which says so in its own line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    names: list[str] = []
    for text in overrides:
        if text.lstrip("+~").split("=", 1)[0].strip() != KEY or "=" not in text:
            continue
        try:
            override = OverridesParser.create().parse_override(text)
        except Exception:  # noqa: BLE001 - Hydra's grammar errors: Hydra reports them when it parses the line
            continue
        names += _strings(override.value())
    return names


def load(names: Iterable[str]) -> list[str]:
    """Import the modules `names` (each once) and return those imported now; MLTRAIN_PLUGINS lists every
    one imported so far. ConfigError (one line) for a name that is not a module name or a module that
    cannot be found; an error inside a plugin's own code is raised as it is (its traceback is the user's)."""
    new: list[str] = []
    for name in dict.fromkeys(n.strip() for n in names):
        if not name or name in _LOADED:
            continue
        if not _MODULE.fullmatch(name):
            raise ConfigError(f"{KEY}: {name!r} is not a module name (e.g. my_method for ./my_method.py, or "
                              "my_pkg.my_method on the Python path)")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or not (name == err.name or name.startswith(err.name + ".")):
                raise  # the plugin itself imports a module that is missing: its own traceback
            raise ConfigError(f"{KEY}: no module named {name!r} in the current folder ({os.getcwd()}) or on the "
                              "Python path") from None
        _LOADED.append(name)
        new.append(name)
    if _LOADED:
        os.environ[PLUGINS_ENV] = ",".join(dict.fromkeys([*from_env(), *_LOADED]))
    return new
