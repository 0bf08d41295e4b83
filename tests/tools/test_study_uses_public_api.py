"""The study reads mltrain-compare through its public API only (`mltrain.tools.compare`, whose names
are listed in its `__all__`, or `mltrain.tools.compare.api`), never through compare's own modules
(loading, analysis, verdict, report, ...): compare may change inside without the study noticing.
Read from the source with `ast` (tests/test_layers.py's reading), so lazy imports count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_layers import PACKAGE, import_statements, modules

import mltrain.tools.compare as compare

PUBLIC = {"mltrain.tools.compare", "mltrain.tools.compare.api"}


def study_modules() -> dict[str, Path]:
    return {n: p for n, p in modules().items() if n == "mltrain.tools.study" or n.startswith("mltrain.tools.study.")}


def compare_imports(name: str, path: Path) -> list[tuple[int, str, tuple]]:
    return [(line, base, names) for line, base, names in import_statements(name, path)
            if base == "mltrain.tools.compare" or base.startswith("mltrain.tools.compare.")]


def test_the_study_modules_exist_and_some_import_compare():
    found = study_modules()
    assert "mltrain.tools.study.ladder" in found and "mltrain.tools.study.stages" in found
    assert any(compare_imports(n, p) for n, p in found.items())  # else the test below checks nothing


@pytest.mark.parametrize("name", sorted(study_modules()))
def test_a_study_module_imports_only_compares_public_api(name):
    path = study_modules()[name]
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: {base}" for line, base, _ in compare_imports(name, path)
             if base not in PUBLIC]
    assert not wrong, "the study reaches into mltrain-compare's internals: " + "; ".join(wrong)
    # and from the package itself, only what it exports
    private = [f"{n} (line {line})" for line, base, names in compare_imports(name, path)
               if base == "mltrain.tools.compare" for n in names if n not in compare.__all__]
    assert not private, "names not in mltrain.tools.compare.__all__: " + ", ".join(private)


def test_every_exported_name_exists():
    assert all(hasattr(compare, n) for n in compare.__all__)


def test_the_check_catches_an_internal_import(tmp_path):
    fake = tmp_path / "mod.py"
    fake.write_text("def f():\n    from mltrain.tools.compare.verdict import fit_band\n")
    hits = compare_imports("mltrain.tools.study.mod", fake)
    assert [(line, base) for line, base, _ in hits] == [(2, "mltrain.tools.compare.verdict")]
    assert ast.parse(fake.read_text())  # the source the check read is valid Python
