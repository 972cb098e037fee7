"""The walk of an Avro record against the limits before fastavro reads it (streams/codecs/schemas/avro_shape.py):
recursive records within the depth read, deeper ones and too many items refused on the count, however deep."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from streams.codecs.schemas import Limits, Reason
from streams.codecs.schemas.limits import DEFAULT_MAX_DEPTH
from tests.support.schemas import decoder, reason, varint

NODE = {
    "type": "record",
    "name": "Node",
    "fields": [
        {"name": "v", "type": "int"},
        {"name": "next", "type": ["null", "Node"]},
        {"name": "kids", "type": {"type": "array", "items": "Node"}, "default": []},
    ],
}


def linked(depth: int) -> bytes:
    """A Node list `depth` records deep, as Avro: each v=0, next=the rest, no kids."""
    return b"\x00\x02" * (depth - 1) + b"\x00\x00" + b"\x00" * depth


def test_it_reads_a_recursive_avro_record_within_the_depth() -> None:
    value: dict[str, Any] | None = None
    for number in range(3):
        value = {"v": number, "next": value, "kids": []}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(NODE), value)
    decoded = decoder(NODE).decode(out.getvalue())
    assert decoded is not None
    assert json.loads(decoded)["next"]["next"]["v"] == 0


@pytest.mark.parametrize("depth", [DEFAULT_MAX_DEPTH + 1, 3_000, 20_000])
def test_it_refuses_a_recursive_avro_record_deeper_than_the_bound_before_fastavro_reads_it(depth: int) -> None:
    # fastavro's reader recurses in C: 20 000 levels crash the process (SIGSEGV), 3 000 raised RecursionError.
    assert reason(decoder(NODE), linked(depth)) is Reason.TOO_LARGE


def test_it_reads_a_record_exactly_as_deep_as_the_bound() -> None:
    # The innermost Node's `kids` array is one level below it: a list of 99 Nodes is 100 deep.
    assert decoder(NODE).decode(linked(DEFAULT_MAX_DEPTH - 1)) is not None
    assert reason(decoder(NODE), linked(DEFAULT_MAX_DEPTH)) is Reason.TOO_LARGE


def test_it_counts_a_recursive_records_items_before_reading_them() -> None:
    # One Node whose `kids` block declares 10^8 Nodes: refused on the count, not after reading what is there.
    raw = b"\x00\x00" + varint(10**8) + b"\x00\x00\x00" * 3
    assert reason(decoder(NODE), raw) is Reason.TOO_LARGE


def test_it_refuses_a_long_array_past_the_item_bound() -> None:
    schema = {"type": "array", "items": "int"}
    raw = varint(50) + b"\x02" * 50 + b"\x00"
    assert decoder(schema).decode(raw) == b"[" + b",".join([b"1"] * 50) + b"]"
    assert reason(decoder(schema, limits=Limits(max_items=10)), raw) is Reason.TOO_LARGE
