"""The one dataclass <-> JSON conversion (compare/jsonable.py): keys renamed and left out as a field says,
nested results, tuples and dicts read back by the fields' types, a missing key or a null read as the
field's default or its type's neutral value; and a shipped comparison.json reads back as the same bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from mltrain.runs.files import json_default
from mltrain.tools.compare import Jsonable, Report, key

SHIPPED = Path(__file__).resolve().parents[2] / "results" / "depth_ladder" / "L4" / "verdict" / "comparison.json"


@dataclass(frozen=True)
class Inner(Jsonable):
    kind: str
    value: Optional[float] = None


@dataclass(frozen=True)
class Outer(Jsonable):
    name: str = key("arm", default="")
    count: int = 0
    inners: tuple[Inner, ...] = ()
    by_name: dict[str, Inner] = field(default_factory=dict)
    first: Optional[Inner] = None
    span: Optional[tuple[float, float]] = None
    note: Optional[str] = key(default=None, omit_none=True)
    draws: Optional[tuple[float, ...]] = key("samples", default=None, omit_none=True)
    share: Optional[float] = key(default=None, when=lambda o: o.draws is not None)
    settings: dict[str, Any] = field(default_factory=dict)


def test_a_result_writes_its_fields_in_order_under_their_keys_and_reads_back_as_itself():
    o = Outer("a", 2, (Inner("x", 1.0), Inner("y")), {"k": Inner("z", 2.0)}, Inner("w"), (1.0, 2.0), "n", (0.5, 1.5),
              0.25, {"optim.lr": 0.1})
    written = json.loads(json.dumps(o.to_json()))
    assert list(written) == ["arm", "count", "inners", "by_name", "first", "span", "note", "samples", "share",
                             "settings"]
    assert written["inners"] == [{"kind": "x", "value": 1.0}, {"kind": "y", "value": None}]
    assert written["span"] == [1.0, 2.0] and written["by_name"] == {"k": {"kind": "z", "value": 2.0}}
    assert Outer.from_json(written) == o


def test_a_field_is_left_out_when_it_says_so():
    written = Outer("b").to_json()
    assert "note" not in written and "samples" not in written and "share" not in written
    assert Outer.from_json(written) == Outer("b")


def test_a_missing_key_or_a_null_takes_the_default_or_the_neutral_value():
    assert Outer.from_json({}) == Outer()
    assert Outer.from_json(None) == Outer()
    nulls = Outer.from_json({"arm": None, "count": None, "inners": None, "by_name": None, "settings": None})
    assert nulls == Outer()
    assert Inner.from_json({}) == Inner("", None)  # a required str with no default: ""
    assert Outer.from_json({"first": {}}).first is None  # an empty object for an optional result: none


def test_the_shipped_comparison_reads_back_as_the_same_bytes():
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is not in this checkout")
    text = SHIPPED.read_text()
    again = json.dumps(Report.from_json(json.loads(text)).to_json(), indent=2, sort_keys=True, default=json_default)
    assert again + "\n" == text
