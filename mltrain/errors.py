"""The errors mltrain reports to a user in one line (exit status 2), never as a traceback.

Each names the key or the file at fault and what to do. Everything else that goes wrong is a bug and
keeps its traceback. This module imports nothing, so every layer (config, coarsening, data) can raise
these without importing each other.
"""

from __future__ import annotations


class MltrainError(Exception):
    """Known bad input or environment; the message is the whole story."""


class ConfigError(MltrainError, ValueError):
    """A configuration that type-checks but cannot run. The message says which key and why."""


class CoarseningError(ConfigError):
    """A coarsening scheme that cannot coarsen this model (depth not divisible, k < 2, unknown scheme)."""


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed here: unreadable, or made by another model, scheme or plan."""


class DataError(MltrainError, RuntimeError):
    """Missing or unusable data: files, shards, tokenizer files. The message says what to do."""


class CompareError(MltrainError):
    """Bad input for `mltrain-compare` (no runs, no baseline, unreadable files): one line, exit status 1."""
