"""Resume correctness (docs/contract.md §4 guarantee): across many disconnects and resumes, every matching message of
each partition arrives exactly once and in partition order, while a producer keeps writing."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from confluent_kafka import Producer
from django.conf import settings

from bindings.selectors import EVENT_ID_ETAG, EVENT_ID_KEY_AND_ETAG
from tests.e2e.test_zilla_scenarios import route
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

PARTITIONS = 4
MESSAGES = 480
RATE = 120  # messages per second: production overlaps the clients' resume cycles
RESUMES = 50
KEYS = 4


class Production(threading.Thread):
    """Produces MESSAGES records at RATE, recording where each went."""

    def __init__(self, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.placed: dict[str, tuple[int, int, bytes]] = {}  # value -> (partition, offset, key)
        self.error: BaseException | None = None

    def run(self) -> None:
        producer = Producer({**settings.KAFKA.producer_config(), "linger.ms": 1})
        try:
            for seq in range(MESSAGES):
                key, value = f"k{seq % KEYS}".encode(), f"m{seq}"

                def report(err: object, msg: object, value: str = value, key: bytes = key) -> None:
                    assert err is None, err
                    self.placed[value] = (msg.partition(), msg.offset(), key)  # type: ignore[attr-defined]

                producer.produce(self.topic, value.encode(), key=key, partition=seq % PARTITIONS, on_delivery=report)
                producer.poll(0)
                time.sleep(1 / RATE)
            assert producer.flush(10) == 0, "records left undelivered"
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def client(url: str, seed: int, expected: Callable[[], set[str]], done: threading.Event) -> list[str]:
    """Reads a few events, disconnects, resumes from the last id; RESUMES times, then reads to the end."""
    rng = random.Random(seed)
    received: list[str] = []
    last_id: str | None = None

    def session(limit: int | None, timeout: float) -> None:
        nonlocal last_id
        headers = {} if last_id is None else {"Last-Event-ID": last_id}
        try:
            stream = EventStream(url, headers=headers, timeout=timeout)
        except httpx.ReadTimeout:
            return  # gave up before the response headers: a client may do that too
        with stream:
            while limit is None or len(received) < start + limit:
                try:
                    event = stream.next_event(timeout)
                except (TimeoutError, StopIteration, httpx.ReadTimeout):
                    return
                received.append(event.text)
                last_id = event.id
                if limit is None and done.is_set() and set(received) >= expected():
                    return

    for _ in range(RESUMES):
        start = len(received)
        session(rng.randint(0, 12), timeout=0.3)
    deadline = time.monotonic() + 30
    while not (done.is_set() and set(received) >= expected()) and time.monotonic() < deadline:
        start = len(received)
        session(None, timeout=1.0)
    return received


def check(received: list[str], expected: set[str], placed: dict[str, tuple[int, int, bytes]]) -> None:
    assert len(received) == len(set(received)), "duplicates"
    assert set(received) == expected
    last: dict[int, int] = {}
    for value in received:
        partition, offset, _ = placed[value]
        assert offset > last.get(partition, -1), f"{value} out of order in partition {partition}"
        last[partition] = offset


@pytest.mark.parametrize("event_id", [EVENT_ID_ETAG, EVENT_ID_KEY_AND_ETAG], ids=["etag", "key-and-etag"])
def test_resumed_clients_receive_every_message_once_in_partition_order(
    daphne_url: str, new_topic: Callable[..., str], event_id: str
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    everything = daphne_url + route(topic, event_id=event_id)
    only_k1 = daphne_url + route(topic, event_id=event_id, filters=[{"key": "k1"}])
    production = Production(topic)
    done = threading.Event()

    def all_values() -> set[str]:
        return set(production.placed)

    def k1_values() -> set[str]:
        return {v for v, (_, _, key) in production.placed.items() if key == b"k1"}

    production.start()
    with ThreadPoolExecutor(max_workers=2) as pool:
        unfiltered = pool.submit(client, everything, 1, all_values, done)
        filtered = pool.submit(client, only_k1, 2, k1_values, done)
        production.join(timeout=60)
        done.set()
        assert production.error is None, production.error
        assert len(production.placed) == MESSAGES
        check(unfiltered.result(timeout=60), all_values(), production.placed)
        check(filtered.result(timeout=60), k1_values(), production.placed)
