"""String-key lookups in the results tools: subscripts with a string constant (`x["key"]`) and
`.get("key")` calls, counted in mltrain/tools/compare/*.py and mltrain/tools/study/*.py by `ast`.
The fewer, the more the results are read through typed fields.

    python tests/tools/string_keys.py        # per module, then the totals and the distinct keys
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "mltrain" / "tools"
FOLDERS = ("compare", "study")


def string_keys(source: str) -> list[str]:
    """Every string constant used as a subscript or as the first argument of `.get`."""
    keys = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            keys.append(node.slice.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            keys.append(node.args[0].value)
    return keys


def count(folders: tuple[str, ...] = FOLDERS) -> dict[str, Counter]:
    """{module path: Counter of its string keys}."""
    return {f"{folder}/{p.name}": Counter(string_keys(p.read_text()))
            for folder in folders for p in sorted((TOOLS / folder).glob("*.py"))}


if __name__ == "__main__":
    found = count()
    total = Counter()
    for name, keys in found.items():
        total += keys
        print(f"{name}: {sum(keys.values())}")
    print(f"total: {sum(total.values())} lookups, {len(total)} distinct keys")
