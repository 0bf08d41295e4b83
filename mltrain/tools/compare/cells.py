"""Text from runs (labels, names, paths, reasons) made safe for a Markdown table: a `|` would end the
cell and a line break the row, so every string of a report is rendered with `|` escaped (GitHub's
Markdown reads `\\|` as a pipe, in code spans too) and line breaks as a visible `⏎`. The JSON report
keeps the text as it is; only what is rendered as Markdown goes through here."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

NEWLINE = " ⏎ "


def cell_text(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", NEWLINE).replace("|", "\\|")


def markdown_safe(obj: Any) -> Any:
    """A copy of `obj` (results, dicts, lists, strings, numbers) with every string, keys included, as
    cell_text."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)(**{f.name: markdown_safe(getattr(obj, f.name)) for f in fields(obj) if f.init})
    if isinstance(obj, str):
        return cell_text(obj)
    if isinstance(obj, dict):
        return {markdown_safe(k): markdown_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(markdown_safe(v) for v in obj)
    return obj
