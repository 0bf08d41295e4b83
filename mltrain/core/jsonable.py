"""One dataclass <-> JSON conversion for every typed result (comparison.json, ladder.json), in place of a
hand-written `to_json`/`from_json` per class (the way lingua reads its configs: one small reader).

A result class is a dataclass that inherits `Jsonable`: it writes its fields in their order, each under its
own name or the one `key(...)` gives, and leaves out a field whose `when` says no; it reads a dict back
by the fields' types (nested results, tuples, dicts of results, Optional); a key the dict lacks, or a
null where the field's type has no None, takes the field's default, else its type's neutral value
(0, "", False, an empty tuple or dict, a result read from {}), so a file written by an earlier version
reads back. A value of the wrong shape (a list where a result's object belongs, a string for a number) is a
`ShapeError` naming where it is ("arms[0].multiplier.M: expected a number, found a string"), not a
traceback from deep inside whoever reads it next.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Optional, TypeVar, Union

T = TypeVar("T", bound="Jsonable")
# What each plain field type accepts from JSON (a float field takes an int: JSON has one kind of number)
SCALARS: dict[Any, tuple[type, ...]] = {float: (int, float), int: (int,), str: (str,), bool: (bool,),
                                        list: (list,), tuple: (list,), dict: (dict,)}
NAMES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "a number",
         float: "a number", type(None): "null"}
_HINTS: dict[type, dict[str, Any]] = {}
NEUTRAL: dict[Any, Callable[[], Any]] = {int: int, str: str, bool: bool, tuple: tuple, dict: dict}


class ShapeError(ValueError):
    """JSON that parses but is not the shape of the result read from it: `where` (a path of keys and list
    indices, "arms[0].multiplier") and `what` (what was expected and found)."""

    def __init__(self, what: str, where: str = "") -> None:
        self.what, self.where = what, where
        super().__init__(f"{where}: {what}" if where else what)

    def at(self, step: str) -> "ShapeError":
        """The same error one step further out (a key, or "[i]" for an index)."""
        return ShapeError(self.what, step + ("" if not self.where or self.where.startswith("[") else ".") + self.where)


def _expected(what: str, value: Any) -> ShapeError:
    return ShapeError(f"expected {what}, found {NAMES.get(type(value), type(value).__name__)}")


@dataclasses.dataclass(frozen=True)
class Spec:
    """How a field is written: under `name` (None: its own), only `when` the object says so, and not at all
    where it is None (`omit_none`)."""

    name: Optional[str] = None
    when: Optional[Callable[[Any], bool]] = None
    omit_none: bool = False


PLAIN, SPEC = Spec(), "jsonable"  # a field without key(...); its metadata's key


def key(name: Optional[str] = None, when: Optional[Callable[[Any], bool]] = None, omit_none: bool = False,
        **field: Any) -> Any:
    """A field written under `name` (default: its own) and only `when` the object says so (`omit_none`: when
    it is not None); `field`: dataclasses.field's default or default_factory."""
    return dataclasses.field(metadata={SPEC: Spec(name, when, omit_none)}, **field)


class Jsonable:
    """The JSON of a dataclass result, written and read by its fields (see the module's doc)."""

    def to_json(self) -> dict[str, Any]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {_key(f): write(getattr(self, f.name)) for f in fields if _written(f, self)}

    @classmethod
    def from_json(cls: type[T], entry: Optional[dict[str, Any]]) -> T:
        e, hints = {} if entry is None else entry, _hints(cls)
        if not isinstance(e, dict):
            raise _expected("an object", e)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.init:
                try:
                    values[f.name] = _field(f, hints[f.name], e.get(_key(f)))
                except ShapeError as err:
                    raise err.at(_key(f)) from None
        return cls(**values)


def write(value: Any) -> Any:
    """A result, or a tuple, list or dict of them, as its JSON."""
    if isinstance(value, Jsonable):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [write(v) for v in value]
    if isinstance(value, dict):
        return {k: write(v) for k, v in value.items()}
    return value


def _spec(f: dataclasses.Field) -> Spec:
    return f.metadata.get(SPEC, PLAIN)


def _written(f: dataclasses.Field, obj: Any) -> bool:
    spec = _spec(f)
    return (spec.when is None or spec.when(obj)) and not (spec.omit_none and getattr(obj, f.name) is None)


def _key(f: dataclasses.Field) -> str:
    return _spec(f).name or f.name


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _field(f: dataclasses.Field, tp: Any, value: Any) -> Any:
    if value is not None or _optional(tp) is not None:
        return read(tp, value)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    origin = typing.get_origin(tp) or tp
    if isinstance(origin, type) and issubclass(origin, Jsonable):
        return origin.from_json({})
    return NEUTRAL.get(origin, lambda: None)()


def _optional(tp: Any) -> Any:
    """X of Optional[X] (None: `tp` is no Optional)."""
    if typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return None


def read(tp: Any, value: Any) -> Any:
    """`value` (from JSON) as the type `tp` (ShapeError: not of its shape)."""
    inner = _optional(tp)
    tp = inner or tp
    origin, args = typing.get_origin(tp) or tp, typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Jsonable):
        if value is None or (inner is not None and value == {}):  # an optional result written as {} is none
            return None
        return origin.from_json(value)
    if value is None:
        return None
    accepted = SCALARS.get(origin)
    if accepted is not None and (not isinstance(value, accepted) or (bool not in accepted and isinstance(value, bool))):
        raise _expected(NAMES[accepted[-1]], value)
    if origin is tuple:
        item = args[0] if args else Any
        if len(args) == 2 and args[1] is not Ellipsis:
            return tuple(value)
        return tuple(_each(lambda i, v: read(item, v), enumerate(value)))
    if origin is dict and len(args) == 2:
        return dict(_each(lambda k, v: (str(k), read(args[1], v)), value.items()))
    return value


def _each(read_one: Callable[[Any, Any], Any], items: Any) -> Any:
    """Each (index or key, value) read, a ShapeError named by where it was."""
    for at, v in items:
        try:
            yield read_one(at, v)
        except ShapeError as err:
            raise err.at(f"[{at}]" if isinstance(at, int) else str(at)) from None
