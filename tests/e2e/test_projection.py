"""Projection on a live server and Kafka (docs/contract.md §7): a route's `fields` keep those parts of each value,
nested shape kept; a client asks for fewer with `?fields=`, and anything else is a `400` problem naming it."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from bindings.services import do_put_route
from tests.conftest import unique
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {"id": 1, "price": 9.5, "item": {"name": "tea", "sku": "t-1", "stock": 4}, "note": "n" * 2000}


def test_a_route_projects_each_value_to_its_fields_and_a_client_to_fewer(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, path = new_topic(), "/" + unique("tiles")
    do_put_route(name=path[1:], path=path, topic=topic, fields=["/price", "/item/name"])
    produce(topic, json.dumps(ORDER).encode(), key=b"o1")
    produce(topic, b"not json")
    produce(topic, None, key=b"o1")

    with EventStream(daphne_url + path, timeout=20) as stream:
        events = stream.events(3, timeout=20)
    assert json.loads(events[0].text) == {"price": 9.5, "item": {"name": "tea"}}
    assert events[1].text == "not json"
    assert events[2].event == "delete"
    with EventStream(f"{daphne_url}{path}?fields=/item/name", timeout=20) as stream:
        assert json.loads(stream.next_event(timeout=20).text) == {"item": {"name": "tea"}}


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("fields=/item/sku", "'/item/sku' is not one of this route's fields (/price, /item/name)"),
        ("fields=price", "a JSON Pointer starts with '/'"),
        ("fields=", "`fields` lists JSON Pointers"),
    ],
)
def test_a_client_asking_for_other_fields_gets_a_400_naming_them(
    daphne_url: str, new_topic: Callable[..., str], query: str, words: str
) -> None:
    topic, path = new_topic(), "/" + unique("tiles")
    do_put_route(name=path[1:], path=path, topic=topic, fields=["/price", "/item/name"])
    response = httpx.get(f"{daphne_url}{path}?{query}", timeout=10)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["parameter"] == "fields"
    assert words in problem["detail"], problem
