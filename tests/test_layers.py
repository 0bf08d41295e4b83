"""The layers of mltrain/ point one way: a module imports only modules of its own layer or of the layers
below it, and no import cycle exists between modules. Read from the source with `ast`, so every import
counts: at the top of a file, inside a function (a lazy import), and under `if TYPE_CHECKING:` (a type
named from a layer above is a dependency on it all the same)."""

from __future__ import annotations

import ast
import itertools
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mltrain"

# Bottom up; a module belongs to the layer of the longest prefix that names it (docs/architecture.md).
LAYERS = [
    ("core", ["mltrain", "mltrain.core", "mltrain.optim_settings"]),
    ("method", ["mltrain.method"]),
    ("data", ["mltrain.data"]),
    ("model", ["mltrain.model"]),
    ("runs", ["mltrain.runs"]),
    ("training", ["mltrain.training"]),
    ("runtime", ["mltrain.runtime"]),
    ("config", ["mltrain.config"]),
    ("run", ["mltrain.run", "mltrain.preflight"]),
    ("cli", ["mltrain.cli"]),
    ("tools", ["mltrain.tools", "mltrain.console"]),
]


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package tree at `root`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_statements(name: str, path: Path):
    """(line, module, names) for every import statement in module `name`'s source, anywhere in it (lazy
    and TYPE_CHECKING ones too), relative imports resolved; `names` is () for `import a`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            yield node.lineno, base, tuple(alias.name for alias in node.names)


def imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """The modules of `known` that module `name` imports, anywhere in its source, each with the line of
    its first import. `from a import b` counts `a` and, when it is a module, `a.b`."""
    found: dict[str, int] = {}
    for line, base, names in import_statements(name, path):
        for target in (base, *(f"{base}.{n}" for n in names)):
            if target in known and target != name:
                found.setdefault(target, line)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """Module -> {imported module: line}. A package importing its own submodules (its __init__ gathering
    them) is how a package is made, not a dependency, and is left out."""
    mods = modules(root)
    graph = {}
    for name, path in mods.items():
        graph[name] = {t: line for t, line in imports(name, path, set(mods)).items() if not t.startswith(name + ".")}
    return graph


def layer_of(module: str) -> int:
    best, index = "", None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, i
    if index is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)")
    return index


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import of a module from a layer above the importer's, as `a (layer) -> b (layer), line n`."""
    out = []
    for module, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            if layer_of(target) > layer_of(module):
                out.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                           f"({LAYERS[layer_of(target)][0]}), line {line}")
    return out


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], itertools.count()

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_every_module_of_mltrain_is_in_a_layer():
    for module in modules():
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own():
    problems = upward_imports(import_graph())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checks_see_lazy_type_checking_and_relative_imports(tmp_path):
    """A planted upward import is found wherever it hides, and so is a cycle."""
    root = tmp_path / "mltrain"
    (root / "method").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "config.py").write_text("X = 1\n")
    (root / "method" / "__init__.py").write_text("from mltrain.method import a  # the package gathers its modules\n")
    (root / "method" / "a.py").write_text("def f():\n    from mltrain.config import X\n    return X\n")
    (root / "method" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "    from .. import config\nfrom . import c\n")
    (root / "method" / "c.py").write_text("from mltrain.method import b\n")
    graph = import_graph(root)
    assert upward_imports(graph) == [
        "mltrain.method.a (method) imports mltrain.config (config), line 2",
        "mltrain.method.b (method) imports mltrain.config (config), line 3",
    ]
    assert cycles(graph) == [["mltrain.method.b", "mltrain.method.c"]]


@pytest.mark.parametrize("name", [n for n, _ in LAYERS])
def test_each_layer_holds_a_module(name):
    prefixes = dict(LAYERS)[name]
    assert any(any(m == p or m.startswith(p + ".") for p in prefixes) for m in modules()), name


CONFIG_PACKAGE = "mltrain.conf"  # conf/, shipped inside the package by pyproject.toml (no Python source)


def missing_modules(root: Path = PACKAGE) -> list[str]:
    """`module:line imports X` for every import of an `mltrain` module that does not exist (a module
    moved by a refactoring and still imported lazily, where only the call that reaches it would fail)."""
    mods = modules(root)
    return [f"{name}:{line} imports {base}" for name, path in sorted(mods.items())
            for line, base, _ in import_statements(name, path)
            if (base == "mltrain" or base.startswith("mltrain.")) and base not in mods and base != CONFIG_PACKAGE]


def test_every_import_of_an_mltrain_module_names_one_that_exists():
    assert not missing_modules()


def test_a_lazy_import_of_a_module_that_moved_is_found(tmp_path):
    pkg = tmp_path / "mltrain"
    (pkg / "training").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "training" / "__init__.py").write_text("")
    (pkg / "flops.py").write_text("def f():\n    from mltrain.training.flops import g\n")
    assert missing_modules(pkg) == ["mltrain.flops:2 imports mltrain.training.flops"]


MAX_FUNCTION_LINES = 80  # a function reads in one screen (docs/contributing.md)


def long_functions(root: Path = PACKAGE, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`module:line name (N lines)` for every function or method of the package longer than `limit`
    lines, decorators and docstring included."""
    found = []
    for name, path in sorted(modules(root).items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = node.end_lineno - start + 1
                if n > limit:
                    found.append(f"{name}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_is_over_80_lines():
    assert not long_functions(), "\n".join(long_functions())


def test_a_long_function_is_found(tmp_path):
    pkg = tmp_path / "mltrain"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def f():\n{body}\n\ndef g():\n    return 1\n")
    assert long_functions(pkg) == [f"mltrain.long:1 f ({MAX_FUNCTION_LINES + 1} lines)"]
