"""What `make run`'s demo commands create and send: demo_setup's two routes, the Avro topic's inline catalog and
topic model (idempotent), and demo_producer's records on both topics."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message
from django.conf import settings
from django.core.management import call_command

from bindings.models import Change, InlineSchema
from bindings.selectors import catalog_specs, route_specs, topic_model_specs, topic_models_for
from streams.codecs.schemas.avro import AvroReader
from streams.management import demo_orders
from streams.management.commands import demo_setup
from tests.conftest import unique

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def password_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_setup, "PASSWORD_FILE", tmp_path / "demo-admin-password")


def setup(items: str, orders: str) -> str:
    out = StringIO()
    call_command("demo_setup", "--topic", items, "--avro-topic", orders, "--avro-path", "/orders", stdout=out)
    return out.getvalue()


def test_demo_setup_creates_the_avro_route_with_its_catalog_and_topic_model(new_topic: Callable[..., str]) -> None:
    items, orders = new_topic(), new_topic()
    out = setup(items, orders)
    assert f"route: /orders -> {orders} (Avro, catalog demo, shown as JSON)" in out
    routes = {route.name: route for route in route_specs()}
    assert (routes["demo-items"].topic, routes["demo-orders"].topic) == (items, orders)
    assert routes["demo-orders"].paths == ("/orders",)
    model = topic_models_for(topic_model_specs(), orders)
    assert model is not None
    assert model.key is None
    assert model.value is not None
    assert (model.value.model, model.value.catalog, model.value.strategy) == ("avro", "demo", "topic")
    (catalog,) = (catalog for catalog in catalog_specs() if catalog.name == "demo")
    assert catalog.kind == "inline"
    assert [(s.subject, s.version, s.format) for s in catalog.schemas] == [(f"{orders}-value", 1, "avro")]
    assert json.loads(catalog.schemas[0].text) == demo_orders.SCHEMA


def test_demo_setup_run_again_changes_nothing_and_keeps_other_topics_schemas(new_topic: Callable[..., str]) -> None:
    items, orders = new_topic(), new_topic()
    setup(items, orders)
    changes = Change.objects.count()
    setup(items, orders)
    assert Change.objects.count() == changes
    assert InlineSchema.objects.filter(subject=f"{orders}-value").count() == 1
    # Another Avro topic (`--avro-topic`) joins the catalog: the first topic's model still finds its schema.
    other = new_topic()
    setup(items, other)
    assert set(InlineSchema.objects.values_list("subject", flat=True)) == {f"{orders}-value", f"{other}-value"}


def consume(topic: str, count: int, timeout: float = 20) -> list[Message]:
    consumer = Consumer({**settings.KAFKA.consumer_config(), "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    return found


def test_demo_producer_sends_json_items_and_plain_avro_orders(new_topic: Callable[..., str]) -> None:
    items, orders = new_topic(), new_topic()
    call_command("demo_producer", "--topic", items, "--avro-topic", orders, "--count", "3", "--interval", "0")
    assert [json.loads(m.value() or b"")["seq"] for m in consume(items, 3)] == [1, 2, 3]
    reader = AvroReader(demo_orders.SCHEMA_TEXT)  # no framing: the bytes are the plain Avro encoding
    decoded = sorted((reader.read(m.value() or b"") for m in consume(orders, 3)), key=lambda order: order["id"])
    assert [order["id"] for order in decoded] == ["o-1", "o-2", "o-3"]
    assert decoded[0]["total"] == "13.50"
    assert (decoded[0]["note"], decoded[2]["note"]) == (None, "leave at the door")
    assert decoded[0]["placed_at"].endswith("Z")
