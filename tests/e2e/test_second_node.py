"""Two nodes, two platform/web.py on two ports against the same Postgres, Redis and Kafka: a client resumes on
the other node with nothing lost or repeated, and a change made through one node's API reaches the other's
streams and routes. One worker per node: a node's /-/health then speaks for the whole node."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from bindings.api.permissions import grant_api_writer
from bindings.services import do_put_route
from tests.conftest import health, unique, wait_until
from tests.e2e.test_live_changes import Ticker, ended
from tests.support.servers import HOST, stop_web, web_started
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nodes() -> Iterator[tuple[str, str]]:
    """Node A and node B: their base URLs."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for _ in range(2):
            process, port = web_started(processes=1)
            started.append(process)
            urls.append(f"http://{HOST}:{port}")
        yield urls[0], urls[1]
    finally:
        for process in started:
            stop_web(process)


@pytest.fixture
def api_of_a(nodes: tuple[str, str]) -> Iterator[httpx.Client]:
    """Node A's REST API, as a machine with a writer's token."""
    writer = User.objects.create_user(unique("ci"), is_staff=True)
    grant_api_writer(writer)
    key = Token.objects.create(user=writer).key
    with httpx.Client(base_url=nodes[0], headers={"authorization": f"Token {key}"}, timeout=10) as client:
        yield client


def by_partition(events: list[Event]) -> dict[int, list[int]]:
    """The sequence numbers received per partition, in order (values are `<partition>:<sequence>`)."""
    seen: dict[int, list[int]] = defaultdict(list)
    for event in events:
        partition, sequence = event.text.split(":")
        seen[int(partition)].append(int(sequence))
    return dict(seen)


def test_a_client_resumes_on_the_other_node_with_nothing_lost_or_repeated(
    nodes: tuple[str, str], new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    node_a, node_b = nodes
    topic = new_topic(partitions=2)
    name = unique("resume")
    do_put_route(name=name, path=f"/{name}", topic=topic)
    sent = {0: 0, 1: 0}

    def produce_round(count: int) -> None:
        for _ in range(count):
            for partition in (0, 1):
                produce(topic, f"{partition}:{sent[partition]}".encode(), partition=partition)
                sent[partition] += 1

    produce_round(3)
    with EventStream(f"{node_a}/{name}") as on_a:
        before = on_a.events(6)
    assert by_partition(before) == {0: [0, 1, 2], 1: [0, 1, 2]}
    wait_until(lambda: health(node_a)["streams"] == 0)  # node A saw the client go
    produce_round(3)  # missed while away
    last_id = before[-1].id or ""
    with EventStream(f"{node_b}/{name}", headers={"Last-Event-ID": last_id}) as on_b:
        missed = on_b.events(6)
        assert health(node_b)["streams"] == 1
        produce_round(2)  # live on node B
        live = on_b.events(4)
        produce(topic, b"0:sentinel", partition=0)
        assert on_b.next_event().text == "0:sentinel", "something repeated after the live events"
    assert by_partition(missed) == {0: [3, 4, 5], 1: [3, 4, 5]}
    assert by_partition(live) == {0: [6, 7], 1: [6, 7]}
    received = by_partition(before + missed + live)
    assert received == {partition: list(range(count)) for partition, count in sent.items()}


def test_a_change_through_one_nodes_api_closes_only_the_changed_streams_on_the_other(
    nodes: tuple[str, str],
    api_of_a: httpx.Client,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    node_a, node_b = nodes
    edited_topic, other_topic = new_topic(), new_topic()
    produce(edited_topic, b"old")
    edited, other = "/" + unique("edited"), "/" + unique("other")
    do_put_route(name=edited[1:], path=edited, topic=edited_topic)
    do_put_route(name=other[1:], path=other, topic=other_topic)
    closes_a, closes_b = health(node_a)["closed_on_change"], health(node_b)["closed_on_change"]
    ticker = Ticker(produce, other_topic)
    try:
        with EventStream(node_b + edited) as changing, EventStream(node_b + other) as steady:
            assert changing.next_event().text == "old"
            received = [steady.next_event().text for _ in range(5)]
            patched = api_of_a.patch(f"/api/v1/routes{edited}/", json={"filters": [{"key": "k"}]})
            assert patched.status_code == 200, patched.text
            assert ended(changing, timeout=5), "node B did not close the stream of the route changed on node A"
            time.sleep(0.5)  # the other stream keeps receiving through and after the change
            sent = ticker.stop()
            while len(received) < sent:
                received.append(steady.next_event(timeout=5).text)
        assert received == [f"tick-{n}" for n in range(sent)]  # no gap, no duplicate, never reconnected
    finally:
        ticker.stop()
    assert health(node_b)["closed_on_change"] == closes_b + 1
    assert health(node_a)["closed_on_change"] == closes_a  # node A held no stream of the route
    produce(edited_topic, b"new", key=b"k")
    with EventStream(node_b + edited) as again:  # node B serves the route as changed on node A
        assert again.next_event().text == "new"


def test_a_route_created_through_one_nodes_api_is_served_by_the_other(
    nodes: tuple[str, str],
    api_of_a: httpx.Client,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    node_b = nodes[1]
    topic = new_topic()
    produce(topic, b"hello")
    path = "/" + unique("new")
    with EventStream(node_b + path) as before:  # node B has read its table, and it has no such route
        assert before.response.status_code == 404
    reloads = health(node_b)["route_reloads"]
    created = api_of_a.put(f"/api/v1/routes{path}/", json={"paths": [path], "topic": topic})
    assert created.status_code == 201, created.text
    # The announcement reaches node B through Redis: it reads its table again with no request of its own.
    wait_until(lambda: health(node_b)["route_reloads"] > reloads, timeout=5)
    with EventStream(node_b + path) as stream:
        assert stream.response.status_code == 200
        assert stream.next_event().text == "hello"
