"""The checks the control plane runs on save: each bad schema is refused with a message, each good one passes."""

from __future__ import annotations

import pytest

from streams.codecs.schemas import SchemaError, check_schema


@pytest.mark.parametrize(
    ("schema_format", "text", "message"),
    [
        ("avro", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}', "nope"),
        ("avro", "{not json", "not an Avro schema"),
        ("protobuf", 'syntax = "proto3"; message M { Missing m = 1; }', '"Missing" is not defined'),
        ("protobuf", "message {", "does not compile"),
        ("json", '{"type": "objekt"}', "not a JSON Schema"),
        ("json", "[1]", "an object or a boolean"),
    ],
)
def test_it_refuses_a_schema_that_is_not_one(schema_format, text, message) -> None:
    with pytest.raises(SchemaError, match=message):
        check_schema(schema_format, text)


def test_it_accepts_schemas_of_each_format() -> None:
    check_schema("avro", '{"type": "map", "values": "string"}')
    check_schema(
        "protobuf",
        'syntax = "proto3"; import "google/protobuf/timestamp.proto"; message M { google.protobuf.Timestamp at = 1; }',
    )
    check_schema("json", '{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}')
