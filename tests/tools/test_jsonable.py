"""The one dataclass <-> JSON conversion (mltrain/core/jsonable.py): keys renamed and left out as a field says,
nested results, tuples and dicts read back by the fields' types, a missing key or a null read as the
field's default or its type's neutral value; and a shipped comparison.json reads back as the same bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from mltrain.runs.files import json_default
from mltrain.core.jsonable import Jsonable, ShapeError, key
from mltrain.tools.compare import Report

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


@pytest.mark.parametrize("entry, where", [
    ([], "expected an object, found a list"),
    ({"count": "2"}, "count: expected a number, found a string"),
    ({"count": True}, "count: expected a number, found true or false"),
    ({"inners": {"kind": "x"}}, "inners: expected a list, found an object"),
    ({"inners": [{"kind": "x"}, 3]}, r"inners\[1\]: expected an object, found a number"),
    ({"inners": [{"kind": 1}]}, r"inners\[0\].kind: expected a string, found a number"),
    ({"by_name": {"k": {"value": "high"}}}, "by_name.k.value: expected a number, found a string"),
    ({"first": [1]}, "first: expected an object, found a list"),
    ({"settings": []}, "settings: expected an object, found a list"),
])
def test_json_of_another_shape_is_one_error_naming_where(entry, where):
    with pytest.raises(ShapeError, match=f"^{where}$"):
        Outer.from_json(entry)


def test_a_float_field_reads_an_integer_and_an_any_field_anything():
    assert Outer.from_json({"first": {"kind": "x", "value": 2}}).first == Inner("x", 2)
    assert Outer.from_json({"settings": {"seed": [1, "a", None]}}).settings == {"seed": [1, "a", None]}
