"""Every test module has a basename of its own: the tests folders are not packages, so pytest imports two
modules of one name as one, and the second fails to collect (under xdist, on the worker that meets it)."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
