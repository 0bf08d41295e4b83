"""The one exception type of the data layer."""

from __future__ import annotations


class DataError(RuntimeError):
    """Bad or missing data. The message names the file or config key at fault and how to fix it."""
