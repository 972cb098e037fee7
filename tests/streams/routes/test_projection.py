"""streams/routes/projection.py: a stream's `fields` keep those parts of each JSON value in its shape; what is not
a JSON object or array passes as it is; streams asking for the same fields share one projection, which encodes a
record once."""

from __future__ import annotations

import json

import pytest

from streams.kafka.client import Record
from streams.routes.projection import projected, projection, tree_of

ORDER = {"id": 7, "price": 3.5, "item": {"name": "tea", "sku": "t-1", "tags": ["a", "b", "c"]}, "pad": "x" * 100}


def keep(value: object, *pointers: str) -> object:
    out = projected(json.dumps(value).encode(), tree_of(pointers))
    assert out is not None
    return json.loads(out)


@pytest.mark.parametrize(
    ("pointers", "kept"),
    [
        (("/price",), {"price": 3.5}),
        (("/item/name", "/price"), {"item": {"name": "tea"}, "price": 3.5}),
        (("/item/name", "/item"), {"item": ORDER["item"]}),  # a prefix keeps all of its part
        (("/item/tags/1",), {"item": {"tags": [None, "b"]}}),
        (("/item/tags/9", "/item/tags/01", "/price"), {"price": 3.5}),  # no such element; not an index
        (("/nothing", "/item/name/deeper"), {}),
    ],
)
def test_it_keeps_the_parts_named_in_the_values_shape(pointers: tuple[str, ...], kept: object) -> None:
    assert keep(ORDER, *pointers) == kept


def test_escaped_tokens_name_keys_with_slashes_and_tildes() -> None:
    assert keep({"a/b": 1, "c~d": 2, "e": 3}, "/a~1b", "/c~0d") == {"a/b": 1, "c~d": 2}


@pytest.mark.parametrize("value", [None, b"plain text", b"42", b'"a string"', b"{not json"])
def test_a_value_that_is_no_json_object_or_array_passes_as_it_is(value: bytes | None) -> None:
    assert projected(value, tree_of(["/price"])) is value


def test_streams_asking_the_same_fields_share_one_projection_that_encodes_a_record_once() -> None:
    first, second = projection(["/price"]), projection(["/price"])
    assert first is not None
    assert first is second
    assert projection([]) is None
    record = Record(0, 0, b"k", json.dumps(ORDER).encode(), ())
    body = first.body(record)
    assert body == b'data:{"price":3.5}\n\n'
    assert second.body(record) is body
    tombstone = Record(0, 1, b"k", None, ())
    assert first.body(tombstone) is tombstone.body
