"""Avro topics as JSON events on the live server, configured the way an operator does it: a catalog and a topic
model written through the REST API (a registry catalog), or a Zilla `zilla.yaml` with an inline catalog imported.

The data plane reads them with the route table (streams/routes/table.py `load_models`), its fetch process decodes
each record once, and every stream of the topic gets the JSON docs/schemas.md documents. A record that does not
decode is skipped and counted in `/metrics` while the stream goes on.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import httpx
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from bindings.history import Actor
from bindings.services import do_put_route
from bindings.zilla.document import do_import_zilla
from tests.conftest import unique, wait_until
from tests.support.schemas import serialize
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "test.e2e",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
AT_MS = 1_714_566_615_250  # 2024-05-01T12:30:15.250Z


def order(number: int, note: str | None = None) -> dict[str, Any]:
    return {"id": f"o-{number}", "status": "PAID", "note": note, "at": AT_MS}


def documented(number: int, note: str | None = None) -> dict[str, Any]:
    return {"id": f"o-{number}", "status": "PAID", "note": note, "at": "2024-05-01T12:30:15.250Z"}


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    started = start_daphne({}, log_name="test-daphne-decoded-topics")
    try:
        yield started
    finally:
        started.stop()


def api_headers() -> dict[str, str]:
    user = User.objects.create_superuser(unique("root"), "root@example.com", "a-long-test-password")
    return {"authorization": f"Token {Token.objects.create(user=user).key}"}


def decode_errors(server: DaphneServer, topic: str) -> dict[str, int]:
    """`sse_decode_errors_total` of `topic` on the server's /metrics, by reason."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("sse_decode_errors_total{") and f'topic="{topic}"' in line:
            reason = re.search(r'reason="([^"]+)"', line)
            assert reason is not None
            found[reason.group(1)] = int(float(line.rsplit(" ", 1)[1]))
    return found


def test_an_avro_topic_modelled_through_the_api_reaches_a_client_as_json(
    server: DaphneServer,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    schema_registry: str,
    confluent_registry: Any,
) -> None:
    topic, catalog = new_topic(), unique("registry")
    headers = api_headers()
    created = httpx.put(
        f"{server.url}/api/v1/catalogs/{catalog}/",
        json={"kind": "apicurio", "url": schema_registry, "max_age_s": 60},
        headers=headers,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    modelled = httpx.put(
        f"{server.url}/api/v1/topic-models/{topic}/",
        json={"value": {"model": "avro", "catalog": catalog, "strategy": "topic"}},
        headers=headers,
        timeout=10,
    )
    assert modelled.status_code == 201, modelled.text
    name = unique("orders")
    do_put_route(name=name, path=f"/{name}", topic=topic)
    serializer = AvroSerializer(confluent_registry, json.dumps(ORDER))
    produce(topic, serialize(serializer, topic, order(1, note="first")))
    produce(topic, b"\x07not avro at all")  # a wrong magic byte: skipped, counted
    produce(topic, serialize(serializer, topic, order(2)))

    with EventStream(f"{server.url}/{name}", timeout=20) as stream:
        events = stream.events(2, timeout=20)
    assert [json.loads(event.text) for event in events] == [documented(1, note="first"), documented(2)]
    wait_until(lambda: decode_errors(server, topic) == {"magic-byte": 1}, timeout=10)


ZILLA_YAML = """
name: shop
catalogs:
  shop_catalog:
    type: inline
    options:
      subjects:
        {topic}-value:
          schema: '{schema}'
bindings:
  north_sse_server:
    type: sse
    kind: server
    exit: north_sse_kafka_mapping
  north_sse_kafka_mapping:
    type: sse-kafka
    kind: proxy
    routes:
      - when:
          - path: /{path}
        exit: north_kafka_cache_client
        with:
          topic: {topic}
  north_kafka_cache_client:
    type: kafka
    kind: cache_client
    options:
      topics:
        - name: {topic}
          value:
            model: avro
            view: json
            catalog:
              shop_catalog:
                - strategy: topic
                  version: latest
"""


def test_a_zilla_file_with_an_inline_avro_catalog_serves_its_topic_as_json(
    server: DaphneServer, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, path = new_topic(), unique("zilla-orders")
    text = ZILLA_YAML.format(topic=topic, path=path, schema=json.dumps(ORDER))
    do_import_zilla(text, actor=Actor(name="tester", source="import"))
    schema = fastavro.parse_schema(ORDER)

    def plain(value: dict[str, Any]) -> bytes:  # an inline catalog's records: Avro's own encoding, no framing
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, value)
        return out.getvalue()

    produce(topic, plain(order(1)))
    produce(topic, plain(order(2, note="two"))[:3])  # cut short: skipped, counted
    produce(topic, plain(order(3, note="three")))
    with EventStream(f"{server.url}/{path}", timeout=20) as stream:
        events = stream.events(2, timeout=20)
    assert [json.loads(event.text) for event in events] == [documented(1), documented(3, note="three")]
    wait_until(lambda: sum(decode_errors(server, topic).values()) == 1, timeout=10)
