"""A run's metrics rows: the trainer is built with the run's RowSink as its `emit`, and the tracker is
opened into that sink once nothing can refuse the run (run.py): a row before it is a bug, and the sink
is opened once."""

from __future__ import annotations

import pytest

from mltrain.run import RowSink


def test_rows_go_where_the_sink_was_opened_once():
    sink, written = RowSink(), []
    with pytest.raises(RuntimeError, match="before the tracker was opened"):
        sink({"step": 0})
    sink.open(written.append)
    sink({"step": 1})
    with pytest.raises(RuntimeError, match="once"):
        sink.open(print)
    sink({"step": 2})
    assert written == [{"step": 1}, {"step": 2}]
