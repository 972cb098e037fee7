"""Expression filters on a live server and Kafka (docs/contract.md §7): a CEL expression reads the Avro-decoded
value's nested fields and a guard's attribute, and a record on which it fails does not match, is counted in
`/metrics` and never ends the stream."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import httpx
import pytest

from bindings.services import do_put_catalog, do_put_guard, do_put_route, do_put_topic_model
from tests.conftest import unique, wait_until
from tests.support.jwt_keys import guard_fields, token
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "test.e2e",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total", "type": "double"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [{"name": "name", "type": "string"}, {"name": "region", "type": "string"}],
            },
        },
    ],
}


def avro(number: int, total: float, region: str) -> bytes:
    """An inline catalog's record: Avro's own encoding, no framing."""
    out = io.BytesIO()
    value = {"id": f"o-{number}", "total": total, "customer": {"name": f"c{number}", "region": region}}
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), value)
    return out.getvalue()


def failures(daphne_url: str) -> int:
    """`sse_filter_expression_failures_total` on the server's /metrics."""
    for line in httpx.get(f"{daphne_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("sse_filter_expression_failures_total "):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_an_expression_reads_a_nested_field_of_an_avro_value_and_a_guard_attribute(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, catalog, guard = new_topic(), unique("shop"), unique("jwt")
    do_put_catalog(name=catalog, subjects={f"{topic}-value": {"format": "avro", "schema": json.dumps(ORDER)}})
    do_put_topic_model(topic=topic, value={"model": "avro", "catalog": catalog})
    do_put_guard(**guard_fields(guard, attributes={"region": "org.region"}))
    path = "/" + unique("orders")
    expression = f'value.customer.region == guarded["{guard}"].attributes.region && value.total >= 100.0'
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: []}, filters=[{"expression": expression}])
    for number, total, region in ((1, 150.0, "eu"), (2, 500.0, "us"), (3, 20.0, "eu"), (4, 100.0, "eu")):
        produce(topic, avro(number, total, region))

    headers = {"authorization": f"Bearer {token('alice', org={'region': 'eu'})}"}
    with EventStream(daphne_url + path, headers=headers, timeout=20) as stream:
        events = [json.loads(event.text) for event in stream.events(2, timeout=20)]
    assert [(e["id"], e["customer"]["region"]) for e in events] == [("o-1", "eu"), ("o-4", "eu")]
    us = {"authorization": f"Bearer {token('bob', org={'region': 'us'})}"}
    with EventStream(daphne_url + path, headers=us, timeout=20) as stream:
        assert json.loads(stream.next_event(timeout=20).text)["id"] == "o-2"


def test_a_record_the_expression_fails_on_does_not_match_is_counted_and_the_stream_goes_on(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    path = "/" + unique("prices")
    do_put_route(name=path[1:], path=path, topic=topic, filters=[{"expression": "value.price > 10"}])
    before = failures(daphne_url)
    values: list[Any] = [{"price": 20}, {"name": "no price"}, {"price": "dear"}, {"price": 5}, {"price": 30.5}]
    for value in values:
        produce(topic, json.dumps(value).encode())
    produce(topic, b"not json")
    produce(topic, b'{"price": 40}')

    with EventStream(daphne_url + path, timeout=20) as stream:
        prices = [json.loads(event.text)["price"] for event in stream.events(3, timeout=20)]
    assert prices == [20, 30.5, 40]
    # A missing field, a string compared with a number, a value that is text: three failures, the stream went on.
    wait_until(lambda: failures(daphne_url) - before == 3, timeout=10)
