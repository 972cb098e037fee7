"""Avro binary to JSON values: fastavro reads the record with its writer's schema, then a converter compiled once
per schema turns what JSON has no form for into the documented forms (docs/schemas.md).

Unions come out as their plain value (fastavro's default, no `{"string": …}` wrapper), bytes and fixed as
base64, decimals as the exact decimal in a string, dates, times and timestamps as ISO 8601 strings (timestamps
in UTC with `Z`; 0, 3 or 6 fraction digits, as proto3 JSON writes them), uuids as strings, `float` as the shortest
decimal that reads back as the same 32-bit float, and NaN and the infinities as the strings "NaN", "Infinity" and
"-Infinity". A subtree that needs none of this is passed as fastavro gives it, without a walk.

A record's work is bounded (limits.py). The schema's own bounds are checked when it is read (bindings/schemas.py:
no arrays of items that take no bytes, no decimals past 1000 digits), so an Avro record yields at most one item per
byte. fastavro's reader recurses in C, so a record is walked first (`Shape`), cheaply and within the bounds, when
its schema could nest it deeper than `max_depth` (a recursive schema: lists, trees) or when it is long enough to
hold more than `max_items` items (streams/codecs/schemas/avro_shape.py).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import fastavro

from bindings.schemas import avro_bound_problems
from streams.codecs.schemas.avro_shape import Shape
from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.floats import non_finite, shortest_float32
from streams.codecs.schemas.limits import Limits
from streams.codecs.schemas.timing import schema_work

Convert = Callable[[Any], Any]
DEFAULT_LIMITS = Limits()
_TIMESTAMPS = frozenset({"timestamp-millis", "timestamp-micros", "timestamp-nanos"})
_LOCAL_TIMESTAMPS = frozenset({"local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"})


class AvroReader:
    """Reads records written with one schema (and the schemas it references) as JSON-able values."""

    def __init__(self, text: str, references: tuple[str, ...] = ()) -> None:
        with schema_work():
            self._compile(text, references)

    def _compile(self, text: str, references: tuple[str, ...]) -> None:
        named: dict[str, Any] = {}
        try:
            for imported in references:
                fastavro.parse_schema(json.loads(imported), named_schemas=named)
            self.schema = fastavro.parse_schema(json.loads(text), named_schemas=named)
        except Exception as exc:  # fastavro raises a dozen kinds, json its own: all mean "not a schema"
            raise SchemaError(f"not an Avro schema: {exc}") from None
        if problems := avro_bound_problems(self.schema, named):
            raise SchemaError(" ".join(problems))
        try:
            self._convert = _converter(self.schema, named)
            self.shape = Shape(self.schema, named)
        except RecursionError:
            raise SchemaError("an Avro schema nested too deep to read") from None

    def read(self, payload: bytes | memoryview, limits: Limits = DEFAULT_LIMITS) -> Any:
        self.shape.check(payload, limits)
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(
                stream, self.schema, None, return_record_name=True, return_record_name_override=True
            )
        except EOFError:
            raise DecodeError(Reason.TRUNCATED, "the Avro payload ends early") from None
        except Exception as exc:  # bad varints, union indexes, enum indexes, UTF-8: the bytes are not this schema
            raise DecodeError(Reason.INVALID, f"not Avro of its schema: {type(exc).__name__}") from None
        if stream.tell() != len(payload):
            raise DecodeError(Reason.INVALID, f"{len(payload) - stream.tell()} bytes after the Avro value")
        try:
            return value if self._convert is None else self._convert(value)
        except (ValueError, OverflowError, TypeError) as exc:
            raise DecodeError(Reason.INVALID, f"an Avro value out of range: {exc}") from None


@lru_cache(maxsize=256)
def reader(text: str, references: tuple[str, ...] = ()) -> AvroReader:
    """The reader of a schema, made once per schema text (a registry's schemas never change under an id)."""
    return AvroReader(text, references)


def _converter(schema: Any, named: dict[str, Any]) -> Convert | None:
    """A function that makes a decoded value JSON-ready, or None when the value is JSON-ready as it is."""
    return _Compiler(named).compile(schema)


class _Compiler:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.records: dict[str, Convert | None] = {}
        self.pending: dict[str, list[Convert | None]] = {}

    def compile(self, schema: Any) -> Convert | None:
        if isinstance(schema, str):
            return self._named(schema)
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical is not None and (convert := _logical(kind, logical)) is not None:
            return convert
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "array":
            items = self.compile(schema["items"])
            return None if items is None else lambda value: [items(item) for item in value]
        if kind == "map":
            values = self.compile(schema["values"])
            return None if values is None else lambda value: {key: values(item) for key, item in value.items()}
        if kind == "fixed":
            return _base64
        if kind == "enum":
            return None
        return self._named(kind)

    def _named(self, name: str) -> Convert | None:
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        if name in self.records:
            return self.records[name]
        if name in self.pending:  # a recursive record: convert through a cell filled once it is compiled
            cell = self.pending[name]
            return lambda value: value if cell[0] is None else cell[0](value)
        return self.compile(self.named[name])

    def _record(self, schema: dict[str, Any]) -> Convert | None:
        name = schema["name"]
        cell: list[Convert | None] = [None]
        self.pending[name] = cell
        fields = [(field["name"], self.compile(field["type"])) for field in schema["fields"]]
        del self.pending[name]
        converting = [(key, convert) for key, convert in fields if convert is not None]
        convert: Convert | None = None
        if converting:

            def convert(value: dict[str, Any]) -> dict[str, Any]:
                for key, field_convert in converting:
                    value[key] = field_convert(value[key])
                return value

        cell[0] = convert
        self.records[name] = convert
        return convert

    def _union(self, branches: list[Any]) -> Convert | None:
        """A union's value is converted by the branch its Python type tells; several records of one union come as
        `(name, value)` (fastavro's `return_record_name_override`), so the name tells which."""
        by_type: dict[type, Convert | None] = {}
        by_record: dict[str, Convert | None] = {}
        for branch in branches:
            convert = self.compile(branch)
            resolved = self.named.get(branch, branch) if isinstance(branch, str) else branch
            if isinstance(resolved, dict) and resolved.get("type") in ("record", "error"):
                by_record[resolved["name"]] = convert
            for python_type in _python_types(resolved):
                by_type.setdefault(python_type, convert)
        several_records = len(by_record) > 1
        if not several_records and all(convert is None for convert in by_type.values()):
            return None

        def convert_union(value: Any) -> Any:
            if several_records and type(value) is tuple:
                record_convert = by_record.get(value[0])
                return value[1] if record_convert is None else record_convert(value[1])
            branch_convert = by_type.get(type(value))
            return value if branch_convert is None else branch_convert(value)

        return convert_union


def _python_types(schema: Any) -> tuple[type, ...]:
    kind = schema if isinstance(schema, str) else schema.get("type")
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if logical == "decimal":
        return (decimal.Decimal,)
    if logical == "date":
        return (datetime.date,)
    if logical in ("time-millis", "time-micros"):
        return (datetime.time,)
    if logical in _TIMESTAMPS or logical in _LOCAL_TIMESTAMPS:
        return (datetime.datetime,)
    if logical == "uuid":
        return (uuid.UUID, str)
    return _TYPES.get(kind, ())


_TYPES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "string": (str,),
    "bytes": (bytes,),
    "fixed": (bytes,),
    "enum": (str,),
    "array": (list,),
    "map": (dict,),
    "record": (dict,),
    "error": (dict,),
}


def _logical(kind: str, logical: str) -> Convert | None:
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _decimal
    if logical == "date" and kind == "int":
        return _date
    if logical in ("time-millis", "time-micros") and kind in ("int", "long"):
        return _time
    if logical in _TIMESTAMPS and kind == "long":
        return _timestamp
    if logical in _LOCAL_TIMESTAMPS and kind == "long":
        return _local_timestamp
    if logical == "uuid" and kind in ("string", "fixed"):
        return _uuid
    return None  # an unknown logical type is its underlying type, as the Avro specification says


def _base64(value: Any) -> Any:
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value


def _decimal(value: Any) -> Any:
    return format(value, "f") if isinstance(value, decimal.Decimal) else _base64(value)


def _date(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime.date) else value


def _fraction(microsecond: int) -> str:
    if microsecond == 0:
        return ""
    if microsecond % 1000 == 0:
        return f".{microsecond // 1000:03d}"
    return f".{microsecond:06d}"


def _time(value: Any) -> Any:
    if not isinstance(value, datetime.time):
        return value
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond)}"


def _timestamp(value: Any) -> Any:
    if not isinstance(value, datetime.datetime):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC)
    return _iso(value) + "Z"


def _local_timestamp(value: Any) -> Any:
    if not isinstance(value, datetime.datetime):
        return value
    return _iso(value)


def _iso(value: datetime.datetime) -> str:
    """ISO 8601 without an offset; `strftime` would not pad a year before 1000 to four digits."""
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
        + _fraction(value.microsecond)
    )


def _uuid(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else _base64(value)


def _double(value: float) -> float | str:
    return value if math.isfinite(value) else non_finite(value)


def _float(value: float) -> float | str:
    if not math.isfinite(value):
        return non_finite(value)
    return shortest_float32(value)


_PRIMITIVES: dict[str, Convert | None] = {
    "null": None,
    "boolean": None,
    "int": None,
    "long": None,
    "string": None,
    "float": _float,
    "double": _double,
    "bytes": _base64,
}
