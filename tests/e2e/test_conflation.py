"""Conflation on a live server and Kafka (docs/contract.md §7): 100 updates of one key within one interval reach a
client as at most two events, the last carrying the last value; a resume continues after the last record sent;
a client may ask a longer interval, never a shorter one."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from bindings.services import do_put_route
from tests.conftest import unique
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hundred_updates_of_one_key_in_a_second_are_at_most_two_events_then_a_resume(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, path = new_topic(), "/" + unique("prices")
    do_put_route(name=path[1:], path=path, topic=topic, start="live", conflate_ms=1000)
    with EventStream(daphne_url + path, timeout=20) as stream:
        for n in range(1, 101):
            produce(topic, json.dumps({"price": n}).encode(), key=b"EURUSD")
        received: list[Event] = []
        while not received or json.loads(received[-1].text)["price"] != 100:
            received.append(stream.next_event(timeout=20))
        assert len(received) <= 2, [e.text for e in received]
        assert json.loads(received[0].text)["price"] >= 1
        last_id = received[-1].id
    assert last_id is not None

    produce(topic, json.dumps({"price": 101}).encode(), key=b"EURUSD")
    with EventStream(daphne_url + path, headers={"last-event-id": last_id}, timeout=20) as resumed:
        assert json.loads(resumed.next_event(timeout=20).text) == {"price": 101}


def test_a_client_may_ask_a_longer_interval_and_not_a_shorter_one(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, path = new_topic(), "/" + unique("prices")
    do_put_route(name=path[1:], path=path, topic=topic, conflate_ms=500)
    shorter = httpx.get(f"{daphne_url}{path}?conflate_ms=100", timeout=10)
    assert shorter.status_code == 400
    assert shorter.json()["parameter"] == "conflate_ms"
    assert "shorter than this route's 500" in shorter.json()["detail"]
    assert httpx.get(f"{daphne_url}{path}?conflate_ms=soon", timeout=10).status_code == 400
    for n in range(3):
        produce(topic, json.dumps({"price": n}).encode(), key=b"k")
    with EventStream(f"{daphne_url}{path}?conflate_ms=60000", timeout=20) as stream:
        assert json.loads(stream.next_event(timeout=20).text) == {"price": 0}
        produce(topic, b'{"other": 1}', key=b"other")  # a key of its own goes at once, the waiting one does not
        assert json.loads(stream.next_event(timeout=20).text) == {"other": 1}
