"""String-key lookups in the results tools: subscripts with a string constant read (`x["key"]`, not
`x["key"] = ...`) and `.get("key")` calls, counted in mltrain/tools/compare/*.py and
mltrain/tools/study/*.py by `ast`.
The fewer, the more the results are read through typed fields. The lookups inside a `from_json` (the
few readers the generic field-by-field one cannot be: study/rungs.py) are the JSON boundary itself and
are counted apart.

    python tests/tools/string_keys.py        # per module, then the totals and the distinct keys
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "mltrain" / "tools"
FOLDERS = ("compare", "study")


def string_keys(source: str, readers: bool = False) -> list[str]:
    """Every string constant used as a subscript or as the first argument of `.get`: outside the JSON
    readers (`from_json`), or (`readers`) inside them."""
    tree = ast.parse(source)
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "from_json"
              for n in ast.walk(f)}
    keys = []
    for node in ast.walk(tree):
        if (id(node) in inside) != readers:
            continue
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            keys.append(node.slice.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            keys.append(node.args[0].value)
    return keys


def count(folders: tuple[str, ...] = FOLDERS, readers: bool = False) -> dict[str, Counter]:
    """{module path: Counter of its string keys} (see string_keys)."""
    return {f"{folder}/{p.name}": Counter(string_keys(p.read_text(), readers))
            for folder in folders for p in sorted((TOOLS / folder).glob("*.py"))}


def _total(found: dict[str, Counter]) -> Counter:
    return sum(found.values(), Counter())


if __name__ == "__main__":
    found = count()
    for name, keys in found.items():
        print(f"{name}: {sum(keys.values())}")
    total, read = _total(found), _total(count(readers=True))
    print(f"total: {sum(total.values())} lookups, {len(total)} distinct keys "
          f"(and {sum(read.values())} lookups, {len(read)} distinct keys, in the JSON readers from_json)")
