"""The shared data plane under pressure: stalled and slow clients, many subscribers, history older than the cache.

Each test runs its own server (tests/support/servers.py) so its settings and memory are its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bindings.selectors import SLOW_CLIENT_CONFLATE, START_LIVE
from tests.conftest import health, unique, wait_until
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.rawsse import RawStream
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)
MiB = 1024 * 1024


@pytest.fixture
def server_factory() -> Iterator[Callable[..., DaphneServer]]:
    started: list[DaphneServer] = []

    def start(**env: str) -> DaphneServer:
        server = start_daphne(env, log_name=unique("test-daphne-dp"))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def rss(server: DaphneServer) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


def value(index: int, size: int, **fields: object) -> bytes:
    body = json.dumps({"i": index, **fields, "sent": time.time()})
    return (body[:-1] + ', "pad": "' + "x" * max(0, size - len(body) - 12) + '"}').encode()


def index_of(event_text: str) -> int:
    return int(json.loads(event_text)["i"])


def test_a_stalled_client_is_closed_with_memory_bounded_and_resumes_with_nothing_lost(
    server_factory: Callable[..., DaphneServer], new_topic: Callable[..., str], produce: Produce
) -> None:
    server = server_factory(SSE_CACHE_MAX_BYTES=str(4 * MiB), SSE_MAX_PENDING_BYTES=str(MiB))
    topic = new_topic()
    path = route(topic)
    stalled = RawStream(server.port, path, rcvbuf=4096)
    wait_until(lambda: health(server.url)["streams"] == 1)
    before = rss(server)
    count, size = 1200, 32 * 1024  # 38 MiB: what stock daphne would buffer for this client
    for index in range(count):
        produce(topic, value(index, size))
    wait_until(lambda: health(server.url)["closed_slow"] == 1, timeout=30)
    grown = rss(server) - before
    # The bound: the cache (4 MiB), librdkafka's prefetch queue (8 MiB), one fetched batch (4 MiB) and one
    # write (256 KiB) for the connection, and what the C allocator keeps of the 38 MiB that passed through (a
    # stream is open, so nothing is trimmed): measured 10.7-25.1 MiB in five runs. Stock daphne would buffer all
    # 38 MiB for this client on top of the rest.
    assert grown < 32 * MiB, f"RSS grew {grown / MiB:.1f} MiB"

    stalled.pump(timeout=2)
    seen = stalled.events()
    assert stalled.closed
    stalled.close()
    headers = {"Last-Event-ID": seen[-1].id or ""} if seen else {}
    received = [index_of(e.text) for e in seen]
    with EventStream(server.url + path, headers=headers, timeout=20) as resumed:
        while len(received) < count:
            received.append(index_of(resumed.next_event().text))
    assert received == list(range(count))  # every message once, in order: nothing lost across the close


def test_a_slow_client_does_not_delay_fast_ones(
    server_factory: Callable[..., DaphneServer], new_topic: Callable[..., str], produce: Produce
) -> None:
    server = server_factory()
    topic = new_topic()
    path = route(topic, start=START_LIVE)
    stalled = RawStream(server.port, path, rcvbuf=4096)
    count = 300

    def fast_client() -> list[float]:
        latencies: list[float] = []
        with EventStream(server.url + path, timeout=20) as stream:
            stream.next_block()  # subscribed
            while len(latencies) < count:
                event = stream.next_event()
                latencies.append(time.time() - json.loads(event.text)["sent"])
        return latencies

    with ThreadPoolExecutor(max_workers=3) as pool:
        fast = [pool.submit(fast_client) for _ in range(3)]
        wait_until(lambda: health(server.url)["streams"] == 4)
        for index in range(count):
            produce(topic, value(index, 32 * 1024))  # 9.6 MiB: more than the kernel buffers of the stalled one
            time.sleep(0.005)
        results = [future.result(timeout=60) for future in fast]
    wait_until(lambda: health(server.url)["closed_slow"] == 1)  # the stalled one was closed, not waited for
    stalled.close()
    for latencies in results:
        assert len(latencies) == count
        # Generous on purpose (a loaded CI machine); a fan-out that waited for the stalled client would
        # never deliver at all, and one that buffered for it would still be held up behind its writes.
        assert max(latencies) < 2.0, f"worst latency {max(latencies):.2f} s"


def test_one_kafka_consumer_serves_200_subscribers(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    port = int(daphne_url.rsplit(":", 1)[1])
    topics = [new_topic(partitions=2), new_topic(partitions=2)]
    paths = [route(topic) for topic in topics]
    before = health(daphne_url)
    clients = [RawStream(port, paths[i % 2]) for i in range(200)]
    try:
        wait_until(lambda: health(daphne_url)["subscriptions"] == before["subscriptions"] + 200, timeout=30)
        during = health(daphne_url)
        # A worker has one consumer for plain topics and, once a decoded topic is read, one for those; these two
        # topics are plain, so their 200 subscribers add none (earlier tests on this server may have started both).
        assert during["kafka_consumers"] == max(before["kafka_consumers"], 1)
        assert during["fetch_streams"] == before["fetch_streams"] + 4  # partitions, not clients
        for topic in topics:
            produce(topic, b"hello", partition=1)
        for client in clients:
            deadline = time.monotonic() + 10
            while not client.events() and time.monotonic() < deadline:
                client.pump(timeout=0.02)  # a pump reads for all of its time: 200 clients, 0.2 s each, took 40 s
            assert [e.text for e in client.events()] == ["hello"]
    finally:
        for client in clients:
            client.close()


def test_a_replay_older_than_the_cache_joins_the_live_window_without_gap_or_duplicate(
    server_factory: Callable[..., DaphneServer], new_topic: Callable[..., str], produce: Produce
) -> None:
    server = server_factory(SSE_CACHE_MAX_BYTES=str(MiB))
    topic = new_topic(partitions=2)
    size, first, second = 4 * 1024, 400, 400
    for index in range(first):
        produce(topic, value(index, size), partition=index % 2)
    live = EventStream(server.url + route(topic, start=START_LIVE))  # the cache starts at the end
    live.next_block()
    history = route(topic)

    def keep_producing() -> None:
        for index in range(first, first + second):
            produce(topic, value(index, size), partition=index % 2)
            time.sleep(0.003)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        received: list[int] = []
        with EventStream(server.url + history, timeout=20) as stream:
            while len(received) < first + second:
                received.append(index_of(stream.next_event().text))
        producer.join()
    finally:
        live.close()
    assert sorted(received) == list(range(first + second))  # no gap, no duplicate
    for partition in (0, 1):
        mine = [i for i in received if i % 2 == partition]
        assert mine == sorted(mine)
    wait_until(lambda: health(server.url)["historical_readers"] == 0)  # handed over to the cache


def test_a_conflating_client_gets_the_latest_value_per_key_and_stays_open(
    server_factory: Callable[..., DaphneServer], new_topic: Callable[..., str], produce: Produce
) -> None:
    server = server_factory()
    topic = new_topic()
    path = route(topic, start=START_LIVE, slow_client=SLOW_CLIENT_CONFLATE)
    client = RawStream(server.port, path, rcvbuf=4096)
    wait_until(lambda: health(server.url)["streams"] == 1)
    keys, versions = 10, 150
    for version in range(versions):
        for key in range(keys):
            produce(topic, value(version * keys + key, 4 * 1024, key=key, version=version), key=b"k%d" % key)
    latest: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while any(latest.get(k) != versions - 1 for k in range(keys)) and time.monotonic() < deadline:
        client.pump(timeout=0.2)
        latest = {}
        for event in client.events():
            item = json.loads(event.text)
            assert item["version"] > latest.get(item["key"], -1)  # per key, never backwards
            latest[item["key"]] = item["version"]
    assert latest == dict.fromkeys(range(keys), versions - 1)
    assert len(client.events()) < keys * versions  # intermediate values were skipped
    assert not client.closed
    assert health(server.url)["closed_slow"] == 0
    client.close()


def test_history_is_served_from_the_cache_without_a_consumer_per_client(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for index in range(5):
        produce(topic, b"%d" % index)
    path = route(topic)
    with EventStream(daphne_url + path) as first:
        assert [e.text for e in first.events(5)] == ["0", "1", "2", "3", "4"]
        for _ in range(20):  # later clients replay from the cache the first one filled
            response = httpx.get(daphne_url + "/-/health", timeout=5).json()
            assert response["historical_readers"] == 0
            with EventStream(daphne_url + path, headers={"Last-Event-ID": "AQIAAg=="}) as resumed:
                assert resumed.next_event().text == "1"


def test_bootstrap_topics_are_fetched_from_start_before_any_client(
    server_factory: Callable[..., DaphneServer], new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(partitions=2)
    produce(topic, b"early", partition=1)
    server = server_factory(SSE_BOOTSTRAP_TOPICS=topic)
    wait_until(lambda: health(server.url)["fetch_streams"] == 2)
    assert health(server.url)["streams"] == 0
    with EventStream(server.url + route(topic)) as stream:
        assert stream.next_event().text == "early"
