"""Records written to hurt, on the live server: whoever can produce to a decoded topic must not stop a node.

One daphne worker serves two topics: an Avro topic whose inline catalog holds a recursive schema (a linked list
and a tree, as real schemas of lists and trees are), configured through the REST API as an operator would, and
a plain JSON topic beside it. Between good records, the Avro topic gets records nested 3 000 and 20 000 deep and
one declaring 10^8 items. Before decoding ran in a process of its own under bounds, the first of them killed the
worker's fetch process again and again until it gave up: every stream of the worker stopped and `/readyz`
answered 503 for good. Now they are skipped and counted, the good records after them arrive, the plain topic's
stream never pauses longer than its normal latency plus the decoding budget, and `/readyz` stays 200.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from bindings.services import do_put_route
from tests.conftest import unique, wait_until
from tests.e2e.test_decoded_topics import decode_errors
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET_MS = 1000
NODE = {
    "type": "record",
    "name": "Node",
    "fields": [
        {"name": "v", "type": "int"},
        {"name": "next", "type": ["null", "Node"]},
        {"name": "kids", "type": {"type": "array", "items": "Node"}},
    ],
}
PLAIN_EVERY_S = 0.05


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    started = start_daphne({"DECODE_BUDGET_MS": str(BUDGET_MS)}, log_name="test-daphne-hostile-records")
    try:
        yield started
    finally:
        started.stop()


def varint(number: int) -> bytes:
    number = (number << 1) ^ (number >> 63)
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def node(v: int) -> bytes:
    """A Node with no next and no kids, in Avro's own encoding (an inline catalog's records carry no framing)."""
    return varint(v) + b"\x00\x00"


def linked(depth: int) -> bytes:
    return b"\x00\x02" * (depth - 1) + b"\x00\x00\x00" + b"\x00" * (depth - 1)


class Readiness:
    """`/readyz`, asked every 100 ms from a thread until stopped: every status seen."""

    def __init__(self, server: DaphneServer) -> None:
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server.url,), daemon=True)
        self._thread.start()

    def _run(self, url: str) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(0.1):
                self.statuses.append(client.get(f"{url}/readyz").status_code)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(15)
        return self.statuses


class PlainTraffic:
    """The plain topic's producer (a record every PLAIN_EVERY_S) and a stream reading it: the longest gap between
    two of its events, once both run."""

    def __init__(self, server: DaphneServer, topic: str, path: str, produce: Callable[..., tuple[int, int]]) -> None:
        self.arrivals: list[float] = []
        self.sent = 0
        self._stop = threading.Event()
        self._stream = EventStream(f"{server.url}{path}", timeout=5)
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._produce, args=(topic, produce), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _produce(self, topic: str, produce: Callable[..., tuple[int, int]]) -> None:
        while not self._stop.wait(PLAIN_EVERY_S):
            produce(topic, json.dumps({"n": self.sent}).encode())
            self.sent += 1

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self._stream.next_event(timeout=5)
            except (TimeoutError, httpx.HTTPError):
                continue
            self.arrivals.append(time.monotonic())

    def longest_gap(self) -> float:
        times = self.arrivals
        return max((later - earlier for earlier, later in itertools.pairwise(times)), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._threads[1].join(15)
        self._stream.__exit__(None, None, None)
        self._threads[0].join(15)


def test_hostile_records_are_skipped_while_every_other_stream_goes_on(
    server: DaphneServer, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    user = User.objects.create_superuser(unique("root"), "root@example.com", "a-long-test-password")
    headers = {"authorization": f"Token {Token.objects.create(user=user).key}"}
    nodes, plain, catalog = new_topic(), new_topic(), unique("shapes")
    created = httpx.put(
        f"{server.url}/api/v1/catalogs/{catalog}/",
        json={"subjects": {"nodes": {"format": "avro", "schema": json.dumps(NODE)}}},
        headers=headers,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    modelled = httpx.put(
        f"{server.url}/api/v1/topic-models/{nodes}/",
        json={"value": {"model": "avro", "catalog": catalog, "subject": "nodes"}},
        headers=headers,
        timeout=10,
    )
    assert modelled.status_code == 201, modelled.text
    nodes_path, plain_path = f"/{unique('nodes')}", f"/{unique('plain')}"
    do_put_route(name=nodes_path[1:], path=nodes_path, topic=nodes)
    do_put_route(name=plain_path[1:], path=plain_path, topic=plain)
    for number in range(5):
        produce(nodes, node(number))

    with EventStream(f"{server.url}{nodes_path}", timeout=10) as stream:
        assert [json.loads(event.text)["v"] for event in stream.events(5)] == [0, 1, 2, 3, 4]
        traffic = PlainTraffic(server, plain, plain_path, produce)
        readiness = Readiness(server)
        try:
            wait_until(lambda: len(traffic.arrivals) >= 10, timeout=20)
            produce(nodes, linked(3_000))
            produce(nodes, linked(20_000))
            produce(nodes, b"\x00\x00" + varint(10**8) + b"\x00\x00\x00")  # a Node whose kids declare 10^8 Nodes
            sent = time.monotonic()
            for number in range(5, 10):
                produce(nodes, node(number))
            after = [json.loads(event.text)["v"] for event in stream.events(5)]
            delivered_after_s = time.monotonic() - sent
            time.sleep(2)  # the plain stream keeps going a while after them
        finally:
            statuses = readiness.stop()
            traffic.stop()
    assert after == [5, 6, 7, 8, 9]
    assert delivered_after_s < 5, delivered_after_s
    assert statuses, "/readyz was never asked"
    assert set(statuses) == {200}, statuses
    assert traffic.longest_gap() < PLAIN_EVERY_S + BUDGET_MS / 1000, traffic.longest_gap()
    wait_until(lambda: decode_errors(server, nodes) == {"too-large": 3}, timeout=15)
