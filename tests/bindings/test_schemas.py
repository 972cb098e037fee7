"""bindings/schemas.py: each format's checker says what is wrong with a text, and nothing for a good one."""

from __future__ import annotations

import json

import pytest

from bindings.schemas import check_schema, proto_messages

AVRO_ORDER = json.dumps(
    {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}
)
PROTO_ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  message Line { int32 n = 1; }
  repeated Line lines = 3;
}
"""


@pytest.mark.parametrize(
    ("schema_format", "text"),
    [
        ("avro", AVRO_ORDER),
        ("avro", '"string"'),
        ("json", '{"type": "object", "properties": {"id": {"type": "string"}}}'),
        ("json", '{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array"}'),
        ("json", "true"),
        ("protobuf", PROTO_ORDER),
    ],
)
def test_it_accepts_schemas_of_each_format(schema_format: str, text: str) -> None:
    assert check_schema(schema_format, text) == []


@pytest.mark.parametrize(
    ("schema_format", "text", "says"),
    [
        ("avro", "{not json", "An Avro schema is JSON"),
        ("avro", '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "strin"}]}', "strin"),
        ("avro", '{"type": "enum", "name": "E", "symbols": ["a", "a"]}', "unique"),
        ("json", '{"type": 5}', "Not a JSON Schema at type"),
        ("json", "[1]", "an object"),
        ("json", '{"$schema": "https://example.com/mine"}', "Unknown $schema"),
        ("protobuf", 'syntax = "proto3"; message A { strin x = 1; }', '"strin" is not defined'),
        ("protobuf", 'syntax = "proto3";', "declares no message"),
        ("yaml", "a: 1", "The format is one of"),
    ],
)
def test_it_says_what_is_wrong(schema_format: str, text: str, says: str) -> None:
    problems = check_schema(schema_format, text)
    assert problems
    assert says in " ".join(problems)


def test_it_keeps_protoc_messages_free_of_temporary_paths() -> None:
    (problem,) = check_schema("protobuf", 'syntax = "proto3"; message A { strin x = 1; }')
    assert problem.startswith("Does not compile: schema.proto:1:")


def test_it_lists_the_messages_a_proto_declares_with_their_package() -> None:
    assert proto_messages(PROTO_ORDER) == ("shop.Order", "shop.Order.Line")
    assert proto_messages("message {") is None
