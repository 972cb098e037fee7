"""The bounds on one record's work (streams/codecs/schemas/limits.py) as the decoders apply them: bytes, items and
depth of what a record decodes to, and the schema rules that keep a record's work proportional to its bytes
(bindings/schemas.py), refused when a schema is compiled. Recursive Avro, walked before fastavro reads it, is
tests/streams/codecs/schemas/test_avro_shape.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.codecs.schemas import Catalogs, DecodeError, Limits, ModelSpec, Reason
from streams.codecs.schemas import decoder_for as _decoder_for
from tests.support.schemas import decoder, reason, varint


def test_it_refuses_a_key_or_value_over_the_byte_bound_without_reading_it() -> None:
    schema = {"type": "string"}
    raw = varint(2000) + b"x" * 2000
    assert reason(decoder(schema, limits=Limits(max_bytes=1024)), raw) is Reason.TOO_LARGE


def test_it_refuses_decoded_json_over_the_byte_bound() -> None:
    # 600 bytes of `bytes` become 800 of base64, then quoted: past 700, though the record is not.
    schema = {"type": "bytes"}
    raw = varint(600) + b"\x01" * 600
    assert reason(decoder(schema, limits=Limits(max_bytes=700)), raw) is Reason.TOO_LARGE


@pytest.mark.parametrize(
    "items",
    [
        "null",
        {"type": "record", "name": "Empty", "fields": []},
        {"type": "record", "name": "Nothing", "fields": [{"name": "n", "type": "null"}]},
        {"type": "fixed", "name": "Zero", "size": 0},
    ],
)
def test_it_refuses_a_schema_with_an_array_of_items_that_take_no_bytes(items: Any) -> None:
    # Six bytes could declare 10^8 such items, each a value to build: 11 s and 1.3 GB in one record.
    with pytest.raises(DecodeError) as caught:
        decoder({"type": "array", "items": items}).decode(varint(10**8) + b"\x00")
    assert caught.value.reason is Reason.SCHEMA_MISMATCH
    assert "take no bytes" in caught.value.detail


@pytest.mark.parametrize(("precision", "scale"), [(4, 10**9), (10**9, 2), (1001, 0)])
def test_it_refuses_a_decimal_past_a_thousand_digits_or_scaled_past_its_precision(precision: int, scale: int) -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    with pytest.raises(DecodeError) as caught:
        decoder(schema).decode(b"\x04\x01\x00")
    assert caught.value.reason is Reason.SCHEMA_MISMATCH


def test_a_json_record_deeper_than_the_bound_is_too_large() -> None:
    plain = _decoder_for(ModelSpec(model="json"), Catalogs(()), "t", "value", Limits(max_depth=5))
    assert plain.decode(b"[[[[[1]]]]]") == b"[[[[[1]]]]]"
    assert reason(plain, b"[[[[[[1]]]]]]") is Reason.TOO_LARGE
    assert reason(plain, b"[" * 50_000 + b"]" * 50_000) is Reason.TOO_LARGE  # past the parser's own limit too


def test_brackets_and_commas_inside_strings_count_for_nothing() -> None:
    plain = _decoder_for(ModelSpec(model="json"), Catalogs(()), "t", "value", Limits(max_depth=2, max_items=4))
    text = json.dumps({"a": "[[[[,,,,{{{{", "b": ["x,]", '\\"[[']}).encode()
    assert plain.decode(text) == json.dumps(json.loads(text), separators=(",", ":")).encode()


def test_a_json_record_with_more_items_than_the_bound_is_too_large() -> None:
    plain = _decoder_for(ModelSpec(model="json"), Catalogs(()), "t", "value", Limits(max_items=4))
    assert plain.decode(b'{"a":[1,2],"b":{}}') is not None  # 2 members, 2 items
    assert reason(plain, b'{"a":[1,2,3],"b":{}}') is Reason.TOO_LARGE


def test_a_json_schemas_pattern_runs_in_linear_time_and_matches_as_before() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    decode = decoder(schema, model="json")
    assert decode.decode(b'{"s":"aaaa"}') == b'{"s":"aaaa"}'
    # 18 s with Python's backtracking `re` at 28 characters, doubling with each one more
    assert reason(decode, json.dumps({"s": "a" * 5000 + "b"}).encode()) is Reason.SCHEMA_MISMATCH


def test_pattern_properties_and_additional_properties_match_names_as_jsonschema_does() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": False,
    }
    decode = decoder(schema, model="json")
    assert decode.decode(b'{"id":"a","x-n":1}') is not None
    assert reason(decode, b'{"id":"a","x-n":"one"}') is Reason.SCHEMA_MISMATCH
    assert reason(decode, b'{"id":"a","other":1}') is Reason.SCHEMA_MISMATCH


def test_unique_items_are_compared_as_json_schema_compares_them() -> None:
    decode = decoder({"type": "array", "uniqueItems": True}, model="json")
    assert decode.decode(b'[1,true,"1",[1],{"a":1,"b":2}]') is not None
    for duplicated in (b"[1,1.0]", b'[{"a":1,"b":2},{"b":2,"a":1}]', b"[[1,[2]],[1,[2]]]", b"[false,false]"):
        assert reason(decode, duplicated) is Reason.SCHEMA_MISMATCH, duplicated


def test_a_mismatch_names_the_place_and_the_keyword_never_the_value() -> None:
    decode = decoder({"type": "object", "properties": {"card": {"type": "string", "maxLength": 4}}}, model="json")
    with pytest.raises(DecodeError) as caught:
        decode.decode(b'{"card":"4111111111111111"}')
    assert caught.value.detail == "at /card: fails `maxLength`"
    assert "4111" not in str(caught.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "(a)\\1"},
        {"type": "object", "patternProperties": {"(?=x)": {}}},
        {"items": {"$ref": "#/definitions/missing"}},
    ],
)
def test_a_json_schema_records_cannot_be_checked_against_in_bounded_time_is_refused(schema: Any) -> None:
    with pytest.raises(DecodeError) as caught:
        decoder(schema, model="json").decode(b'"x"')
    assert caught.value.reason is Reason.SCHEMA_MISMATCH


@pytest.mark.parametrize("encoding", ["hex", "rot13", "zlib", "idna", "punycode", "unicode_escape"])
def test_a_string_model_in_something_other_than_a_character_set_cannot_decode(encoding: str) -> None:
    spec = ModelSpec(model="string", encoding=encoding)
    with pytest.raises(Exception, match="character set"):
        _decoder_for(spec, Catalogs(()), "t")
