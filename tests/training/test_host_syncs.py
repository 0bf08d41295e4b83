"""No host stall in the step: over steady-state steps of every method, single process and 2 gloo processes,
mltrain's own code converts no tensor to a host value in the step itself, at most one per row it writes
(a train row, an evaluation, a diagnostics row), and under data parallel the stop signal is agreed every
train.stop_check_interval steps, not every step (scripts/syncs.py counts; on a GPU it also counts the
CUDA syncs torch's sync debug mode reports, in scripts/gpu_check.sh)."""

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
from syncs import METHODS, count, problems  # noqa: E402

STOP_EVERY = 16


def assert_bounded(name: str, got: dict) -> None:
    assert not problems(name, got, STOP_EVERY)
    assert got["steps"] >= 40 and got["rows"].get("train row", 0) < got["steps"] / 4, (name, got)  # rows, not steps


@pytest.mark.parametrize("name", list(METHODS))
def test_no_host_sync_in_the_step_and_at_most_one_per_row(name):
    got = count(METHODS[name])
    assert_bounded(name, got)
    assert got["conversions"].get("train row", 0) >= 1  # the counter sees the row's one read
    assert got["rows"].get("stop check", 0) == 0  # one process: the signal is a Python flag
