"""The route page's "Decoding" box (bindings/insights.py): the topic model that covers the route's topic, and the
records the data plane skipped because they do not decode, by topic and reason."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.services import do_put_catalog, do_put_route, do_put_topic_model
from streams.edge.metrics import DECODE_ERRORS
from streams.management import demo_orders
from tests.conftest import unique

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-test-password"))
    return client


def skipped(topic: str, reason: str, records: int) -> None:
    """Count records of `topic` as skipped, where the data plane counts them (streams/edge/metrics.py)."""
    DECODE_ERRORS.labels(topic, reason).inc(records)


def decoding_box(html: str) -> str:
    """The box's text, tags dropped and blanks squeezed."""
    found = re.search(r'<fieldset class="module aligned" id="decoding">(.*?)</fieldset>', html, re.S)
    assert found is not None, "the route page has no Decoding box"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


def avro_model(topic: str) -> None:
    catalog = unique("c")
    do_put_catalog(name=catalog, subjects={f"{topic}-value": {"format": "avro", "schema": demo_orders.SCHEMA_TEXT}})
    do_put_topic_model(topic=topic, value={"model": "avro", "catalog": catalog, "strategy": "topic"})


def test_the_route_page_shows_the_records_its_topic_skipped_by_reason(admin_client: Client) -> None:
    topic = unique("t")
    avro_model(topic)
    route = do_put_route(name="orders", path="/orders", topic=topic)
    skipped(topic, "invalid", 2)
    skipped(topic, "truncated", 1)
    skipped(unique("t"), "invalid", 5)  # another topic's

    page = admin_client.get(f"/admin/bindings/route/{route.pk}/change/")
    box = decoding_box(page.content.decode())
    catalog = page.context["decoding"].value.split("via catalog ")[1].split()[0]
    assert f"Value decoded as avro via catalog {catalog} (subject {topic}-value, version latest)" in box
    assert "Key passed through as bytes" in box
    assert f"{topic} invalid 2 {topic} truncated 1" in box
    assert page.context["decoding"].skipped_total == 3


def test_a_templated_topics_page_sums_each_topic_its_pattern_covers(admin_client: Client) -> None:
    prefix = unique("orders")
    do_put_topic_model(topic=f"{prefix}-*", value={"model": "string"})
    do_put_topic_model(topic=f"{prefix}-eu-*", value={"model": "int64"})  # covers only some of the route's topics
    route = do_put_route(name="orders", path="/orders/{region}", topic=f"{prefix}-${{params.region}}")
    skipped(f"{prefix}-eu", "invalid", 1)
    skipped(f"{prefix}-us", "truncated", 2)
    skipped(f"{prefix}-us", "invalid", 4)
    skipped(f"{prefix}x-eu", "invalid", 7)  # not one of the route's topics

    page = admin_client.get(f"/admin/bindings/route/{route.pk}/change/")
    box = decoding_box(page.content.decode())
    assert f"Topic model {prefix}-* for the topics {prefix}-*" in box
    assert "Value decoded as string (utf_8)" in box
    assert f"{prefix}-eu invalid 1 {prefix}-us invalid 4 {prefix}-us truncated 2" in box
    assert page.context["decoding"].skipped_total == 7


def test_a_route_whose_topic_has_no_model_says_so(admin_client: Client) -> None:
    route = do_put_route(name="items", path="/items", topic=unique("t"))
    box = decoding_box(admin_client.get(f"/admin/bindings/route/{route.pk}/change/").content.decode())
    assert "Topic model no topic model: keys and values are passed through as bytes" in box
    assert "Value" not in box.split("Skipped records")[0]
    assert "Skipped records none" in box
