"""String and numeric models, as Kafka's own serializers write them, through Kafka."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka.serialization import DoubleSerializer, IntegerSerializer, StringSerializer

from streams.codecs.schemas import Catalogs, DecodeError, ModelSpec, Reason, SchemaError, decoder_for
from tests.support.schemas import read_back


def decode(model: str, raw: bytes | None, **options) -> bytes | None:
    return decoder_for(ModelSpec(model, **options), Catalogs([]), "t").decode(raw)  # type: ignore[arg-type]


def test_it_decodes_kafkas_serializers_numbers_and_strings(new_topic, produce) -> None:
    topic = new_topic()
    produce(topic, IntegerSerializer()(-42), key=StringSerializer("utf_8")('clé "1"'))
    produce(topic, DoubleSerializer()(2.5e-3))
    [(key, first), (_, second)] = read_back(topic, 2)

    assert decode("string", key) == '"clé \\"1\\""'.encode()
    assert decode("int32", first) == b"-42"
    assert decode("double", second) == b"0.0025"


def test_it_writes_int64_and_float_big_endian_values_as_json_numbers() -> None:
    assert decode("int64", struct.pack(">q", -(2**62))) == str(-(2**62)).encode()
    assert decode("float", struct.pack(">f", 0.1)) == b"0.1"
    assert decode("double", struct.pack(">d", float("-inf"))) == b'"-Infinity"'
    assert decode("string", "Grüße".encode("latin_1"), encoding="latin_1") == '"Grüße"'.encode()


def test_it_refuses_numbers_of_the_wrong_width_and_text_of_another_encoding() -> None:
    for model, raw in (("int32", b"\x00\x01"), ("int64", b"\x00" * 4), ("double", b"\x00" * 9), ("string", b"\xff")):
        with pytest.raises(DecodeError) as error:
            decode(model, raw)
        assert error.value.reason is Reason.INVALID
    with pytest.raises(SchemaError):
        decode("string", b"", encoding="no-such-charset")
