"""Protobuf records written by confluent-kafka's ProtobufSerializer, through the real registry and Kafka, in the
canonical proto3 JSON mapping."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from google.protobuf import message_factory

from streams.codecs.schemas import (
    Catalogs,
    CatalogSpec,
    DecodeError,
    InlineSchema,
    ModelSpec,
    Reason,
    SchemaError,
    decoder_for,
    protobuf,
)
from streams.codecs.schemas.protobuf import ProtobufReader
from tests.conftest import unique
from tests.support.schemas import read_back, registry_decoder, serialize

SHOP = """
syntax = "proto3";
package test.shop;

message Order {
  int64 id = 1;
  repeated string tags = 2;
  Line first_line = 3;
  repeated Line lines = 4;
  map<string, int32> stock = 5;
  Status status = 6;
  bytes token = 7;
  double total = 8;
  message Line {
    string sku = 1;
    uint64 quantity = 2;
  }
  enum Status {
    STATUS_UNSPECIFIED = 0;
    STATUS_PAID = 1;
  }
}

message Refund {
  string order = 1;
}
"""


def classes(text: str):
    reader = ProtobufReader(text)
    return {
        name: message_factory.GetMessageClass(descriptor)
        for name, descriptor in reader.file.message_types_by_name.items()
    }


def test_it_decodes_a_protobuf_serializer_record_to_proto3_json(
    confluent_registry, new_topic, produce, schema_registry
) -> None:
    topic = new_topic()
    types = classes(SHOP)
    order = types["Order"](id=2**60, tags=["a", "b"], stock={"x": 3}, status=1, token=b"\x01\x02", total=9.5)
    order.first_line.sku = "s-1"
    order.lines.add(sku="s-2", quantity=4)
    refund = types["Refund"](order="o-1")
    config = {"use.deprecated.format": False}
    produce(topic, serialize(ProtobufSerializer(types["Order"], confluent_registry, config), topic, order))
    produce(topic, serialize(ProtobufSerializer(types["Refund"], confluent_registry, config), topic, refund))
    line_type: Any = message_factory.GetMessageClass(ProtobufReader(SHOP).by_name("Order.Line"))  # fields by name
    produce(topic, serialize(ProtobufSerializer(line_type, confluent_registry, config), topic, line_type(quantity=2)))
    (_, first), (_, second), (_, third) = read_back(topic, 3)

    decoder = registry_decoder(schema_registry, "protobuf", topic, strategy="topic")

    assert json.loads(decoder.decode(first)) == {
        "id": str(2**60),
        "tags": ["a", "b"],
        "firstLine": {"sku": "s-1"},
        "lines": [{"sku": "s-2", "quantity": "4"}],
        "stock": {"x": 3},
        "status": "STATUS_PAID",
        "token": "AQI=",
        "total": 9.5,
    }
    assert decoder.decode(second) == b'{"order":"o-1"}'
    assert third is not None
    assert third[5:7] == b"\x04\x00"
    assert decoder.decode(third) == b'{"quantity":"2"}'


def test_it_reads_an_inline_protobuf_message_by_its_record_name() -> None:
    types = classes(SHOP)
    catalogs = Catalogs([CatalogSpec("local", "inline", schemas=(InlineSchema("shop", 1, "protobuf", SHOP),))])
    refund = decoder_for(ModelSpec("protobuf", catalog="local", subject="shop", record="Refund"), catalogs, "t")
    first = decoder_for(ModelSpec("protobuf", catalog="local", subject="shop"), catalogs, "t")
    line = decoder_for(
        ModelSpec("protobuf", catalog="local", subject="shop", record="test.shop.Order.Line"), catalogs, "t"
    )

    assert refund.decode(types["Refund"](order="o-9").SerializeToString()) == b'{"order":"o-9"}'
    assert first.decode(types["Order"](id=-1).SerializeToString()) == b'{"id":"-1"}'
    assert line.decode(b"\x10\x05") == b'{"quantity":"5"}'


def test_it_tells_a_cut_message_from_a_corrupt_one() -> None:
    types = classes(SHOP)
    catalogs = Catalogs([CatalogSpec("local", "inline", schemas=(InlineSchema("shop", 1, "protobuf", SHOP),))])
    decoder = decoder_for(ModelSpec("protobuf", catalog="local", subject="shop", record="Refund"), catalogs, "t")
    whole = types["Refund"](order="a long order id").SerializeToString()

    with pytest.raises(DecodeError) as cut:
        decoder.decode(whole[:-3])
    with pytest.raises(DecodeError) as corrupt:
        decoder.decode(b"\x0f\xff")

    assert (cut.value.reason, corrupt.value.reason) == (Reason.TRUNCATED, Reason.INVALID)


def test_it_names_no_message_for_a_record_that_is_not_in_the_schema() -> None:
    catalogs = Catalogs([CatalogSpec("local", "inline", schemas=(InlineSchema("shop", 1, "protobuf", SHOP),))])
    decoder = decoder_for(ModelSpec("protobuf", catalog="local", subject="shop", record="Nope"), catalogs, "t")

    with pytest.raises(DecodeError) as error:
        decoder.decode(b"")

    assert error.value.reason is Reason.SCHEMA_MISMATCH


def test_a_schema_that_does_not_compile_is_compiled_once_however_often_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[str] = []
    real = protobuf._compile

    def counting(text: str, references: tuple[tuple[str, str], ...], budget: protobuf.Budget) -> Any:
        compiled.append(text)
        return real(text, references, budget)

    monkeypatch.setattr(protobuf, "_compile", counting)
    broken = 'syntax = "proto3"; message Broken { strin x = 1; }  // ' + str(id(compiled))
    for _ in range(3):
        with pytest.raises(SchemaError, match="does not compile"):
            protobuf.reader(broken)
    assert compiled == [broken]  # protoc ran once; the other two were refused from its first answer


def test_a_proto_that_goes_over_its_compile_budget_is_refused() -> None:
    text = 'syntax = "proto3"; message Budgeted { string name = 1; int64 amount = 2; }  // ' + unique("b")

    with pytest.raises(SchemaError, match=r"protoc did not compile the schema within 0\.001 s"):
        protobuf.reader(text, (), protobuf.Budget(timeout_s=0.001, max_bytes=1024 * 1024))  # python takes longer
    with pytest.raises(SchemaError, match="protoc's output for the schema went over 16 bytes"):
        protobuf.reader(text, (), protobuf.Budget(timeout_s=60, max_bytes=16))
    assert protobuf.reader(text).by_name("Budgeted").full_name == "Budgeted"


def test_a_catalogs_proto_compiles_within_the_catalogs_budget() -> None:
    text = 'syntax = "proto3"; message Tiny { string name = 1; }  // ' + unique("b")
    spec = CatalogSpec("local", "inline", schemas=(InlineSchema("t-value", 1, "protobuf", text),), protoc_max_bytes=16)
    decoder = decoder_for(ModelSpec("protobuf", catalog="local", strategy="topic"), Catalogs([spec]), "t")

    with pytest.raises(DecodeError) as error:
        decoder.decode(b"\x0a\x01x")
    assert (error.value.reason, error.value.detail) == (
        Reason.SCHEMA_MISMATCH,
        "protoc's output for the schema went over 16 bytes",
    )
