"""Code below the CLI takes typed config objects: no function in mltrain/ outside the Hydra glue has a
parameter annotated `DictConfig`, nor a `cfg` parameter annotated `Any` (or left unannotated). Read
from the source with `ast`, as tests/test_layers.py reads the imports. The glue is where Hydra hands
the composed config over (docs/architecture.md, "Where the config is typed")."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mltrain"

# The Hydra glue: the modules that receive the composed DictConfig from Hydra and type it once.
GLUE = (
    "cli.py",  # hydra_task and RunGuard's callbacks: the composed config, typed once, checked for the run dir
    "config.py",  # the schema, typed() and the composed-config checks (keys added with +)
    "runs/sweep.py",  # a sweep's jobs composed and checked before any starts
    "data/prepare.py",  # mltrain-prepare's Hydra task and its callback
    "tools/study/compose.py",  # the study's composition of its runs, compared with the run dirs' saved configs
)
# Packages typed on their own terms: none (the method layer names a run's settings by its RunSettings
# Protocol, which this check accepts as any annotation but Any or DictConfig).
NOT_YET_TYPED: tuple[str, ...] = ()


def _annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation) if arg.annotation is not None else ""


def untyped_config_parameters(root: Path = PACKAGE, skip: tuple[str, ...] = GLUE + NOT_YET_TYPED) -> list[str]:
    """`path:line function(parameter: annotation)` for every parameter that takes an untyped config."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in skip or rel.startswith(tuple(s for s in skip if s.endswith("/"))):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                text = _annotation(arg)
                if "DictConfig" in text or (arg.arg == "cfg" and text in ("", "Any")):
                    found.append(f"{rel}:{node.lineno} {node.name}({arg.arg}: {text or 'unannotated'})")
    return found


def test_no_function_below_the_cli_takes_an_untyped_config():
    found = untyped_config_parameters()
    assert not found, "take the typed Config (or its section) instead:\n" + "\n".join(found)


def test_the_check_finds_an_untyped_config_parameter(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "a.py").write_text(
        "from typing import Any\nfrom omegaconf import DictConfig\n"
        "def f(cfg: Any): ...\ndef g(node: DictConfig): ...\ndef h(cfg): ...\ndef ok(cfg: 'Config'): ...\n")
    (tmp_path / "cli.py").write_text("def task(cfg: DictConfig): ...\n")
    found = untyped_config_parameters(tmp_path, skip=("cli.py",))
    assert [f.split(" ", 1)[1] for f in found] == ["f(cfg: Any)", "g(node: DictConfig)", "h(cfg: unannotated)"]
