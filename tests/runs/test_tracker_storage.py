"""The tracker on a full disk: a row is written whole or not at all, and a summary that cannot be written
says what is kept."""

from __future__ import annotations

import os

import pytest

from mltrain.core.errors import StorageError
from mltrain.runs.tracking import LoggerConfig, Tracker


class _FullAfter:
    """os.write that lets `budget` bytes through, then fails like a full disk (short write first)."""

    def __init__(self, budget: int):
        self.budget, self.real = budget, os.write

    def __call__(self, fd: int, data) -> int:
        if self.budget <= 0:
            raise OSError(28, "No space left on device")
        n = self.real(fd, bytes(data[: self.budget]))
        self.budget -= n
        return n


def test_a_row_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    t = Tracker(tmp_path, LoggerConfig(name="jsonl"), {}, name="n", group="g", job_type="single")
    t.log({"step": 1, "flops": 1.0, "train/loss": 2.0})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(os, "write", _FullAfter(10))
    with pytest.raises(StorageError, match=r"keeps its 1 whole rows \(to step 1\)"):
        t.log({"step": 2, "flops": 2.0, "train/loss": 1.5})
    monkeypatch.undo()
    t.finish()
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_a_summary_that_cannot_be_written_says_what_is_kept(tmp_path, monkeypatch):
    t = Tracker(tmp_path, LoggerConfig(name="jsonl"), {}, name="n", group="g", job_type="single")
    t.log({"step": 1, "flops": 1.0})

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mltrain.runs.tracking.write_json_atomic", full)
    with pytest.raises(StorageError, match="summary.json .No space left on device.* keeps all its 1 rows"):
        t.write_summary({"a": 1})
    t.finish()
