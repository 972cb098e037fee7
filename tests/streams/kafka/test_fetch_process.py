"""The fetch process's loop (streams/kafka/fetch_process.py), run in the test process against the broker: what a
turn of it sends the worker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

import pytest
from django.conf import settings

from streams.kafka.decoder_process import Slot
from streams.kafka.fetch_process import Fetch
from streams.kafka.inline_decoder import InlineDecoder
from streams.kafka.records import RecordTuple
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.kafka.test_consumer_processes import SMALL, json_models


@pytest.fixture
def fetch_and_worker() -> Iterator[tuple[Fetch, Connection]]:
    """A decoding fetch process's loop, and the worker's end of its connection."""
    worker, child = Pipe()
    slot = os.memfd_create("test-slot")
    os.ftruncate(slot, Slot.SIZE)
    fetch = Fetch(child, settings.KAFKA.fetcher_config(), 500, InlineDecoder(slot))
    try:
        yield fetch, worker
    finally:
        fetch.decoder.close()
        fetch.consumer.close()
        worker.close()
        child.close()


def sent(worker: Connection) -> list[tuple[Any, ...]]:
    found = []
    while worker.poll(0):
        found.append(worker.recv())
    return found


def test_each_turn_sends_at_most_one_batch_and_every_record_and_end_goes_out(
    fetch_and_worker: tuple[Fetch, Connection], new_topic: Callable[..., str], produce: Produce
) -> None:
    """A batch is in flight until the worker takes it, and a turn that sent two would hold the next poll's records
    back for that (at most two in flight)."""
    fetch, worker = fetch_and_worker
    topic = new_topic(partitions=2)
    for _ in range(5):
        produce(topic, SMALL, partition=0)
    fetch.do_models(json_models(topic, 60_000))
    fetch.do_assign(topic, 0, 0, 1)
    fetch.do_assign(topic, 1, 0, 1)  # empty: its end is reached at once, with nothing of it queued
    records: list[str] = []
    ends: set[int] = set()
    deadline = time.monotonic() + 20
    while ends != {0, 1} and time.monotonic() < deadline:
        fetch.pump(*fetch.poll(0.2))
        batches = [message for message in sent(worker) if message[0] == "batch"]
        assert len(batches) <= 1, batches
        for _, by_partition, eof, _epochs in batches:
            records += [record[3].decode() for record in by_partition.get((topic, 0), [])]
            ends.update(partition for _, partition in eof)
        fetch.in_flight = 0  # the worker took it
    assert ends == {0, 1}
    assert records == [SMALL.decode()] * 5


def test_records_it_decoded_go_out_with_the_ends_its_poll_reached(
    fetch_and_worker: tuple[Fetch, Connection], new_topic: Callable[..., str]
) -> None:
    """Partition 0's records queued for decoding, partition 1's end reached by the same poll: one batch."""
    fetch, worker = fetch_and_worker
    topic = new_topic(partitions=2)
    fetch.do_models(json_models(topic, 60_000))
    fetch.do_assign(topic, 0, 0, 7)
    fetch.do_assign(topic, 1, 0, 7)
    fetch.queue.add((topic, 0), 7, [(0, offset, None, SMALL, (), 0, False) for offset in range(3)])
    fetch.pump({}, [(topic, 1)])
    batches = [message for message in sent(worker) if message[0] == "batch"]
    assert len(batches) == 1
    _, by_partition, eof, epochs = batches[0]
    assert [(record[1], record[3]) for record in by_partition[(topic, 0)]] == [(offset, SMALL) for offset in range(3)]
    assert eof == [(topic, 1)]
    assert epochs == {(topic, 0): 7, (topic, 1): 7}
    assert fetch.in_flight == 1


def test_with_no_partitions_it_waits_for_the_workers_next_command_in_one_call(
    fetch_and_worker: tuple[Fetch, Connection],
) -> None:
    """A fetch process with nothing assigned (the worker's other one, most of the time) has nothing to poll: it
    sleeps until the worker says something, rather than waking ten times a second to find nothing."""
    fetch, worker = fetch_and_worker
    waits: list[float | None] = []
    commands = fetch.commands

    def counted(wait: float | None) -> bool:
        waits.append(wait)
        return commands(wait)

    fetch.commands = counted  # type: ignore[method-assign]
    loop = threading.Thread(target=fetch.run, name="fetch-loop")
    loop.start()
    time.sleep(0.5)
    assert waits == [None]
    worker.send(("stop",))
    loop.join(5)
    assert not loop.is_alive()


def test_a_partition_with_nothing_queued_has_its_records_decoded_by_the_poll_that_fetched_them(
    fetch_and_worker: tuple[Fetch, Connection], new_topic: Callable[..., str], produce: Produce
) -> None:
    """The usual way of a live decoded topic: a record or two per poll, decoded at once, with none of the queue's
    bookkeeping (it cost several per cent of the process's CPU at 100 records a second)."""
    fetch, _ = fetch_and_worker
    topic = new_topic()
    for _ in range(3):
        produce(topic, SMALL)
    fetch.do_models(json_models(topic, 60_000))
    fetch.do_assign(topic, 0, 0, 1)
    records: list[bytes | None] = []
    deadline = time.monotonic() + 20
    while len(records) < 3 and time.monotonic() < deadline:
        polled, _ends = fetch.poll(0.2)
        records += [record[3] for record in polled.get((topic, 0), [])]
        assert not fetch.queue.pending
    assert records == [SMALL] * 3


class Answers:
    """A decoder giving set results (the real one is the subject of tests/streams/kafka/test_decoding.py)."""

    def __init__(self, results: list[Any]) -> None:
        self.results = results

    def decode(self, entries: list[Any]) -> list[Any]:
        assert len(entries) == len(self.results)
        return self.results


def test_records_a_poll_left_untried_go_out_after_those_it_decoded_in_one_batch(
    fetch_and_worker: tuple[Fetch, Connection], new_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll decoded the first record and left the others untried (an answer's size): they are queued due now,
    decoded by the same turn and sent behind it."""
    fetch, worker = fetch_and_worker
    topic = new_topic()
    fetch.do_assign(topic, 0, 0, 4)
    fetched: list[RecordTuple] = [(0, offset, None, SMALL, (), 0, False) for offset in range(3)]
    records = {(topic, 0): fetch.queue.now((topic, 0), 4, fetched, [fetched[0], False, False])}
    monkeypatch.setattr(fetch.decoder, "decode", Answers(fetched[1:]).decode)
    fetch.pump(records, [])
    batches = [message for message in sent(worker) if message[0] == "batch"]
    assert [[record[1] for record in batch[1][(topic, 0)]] for batch in batches] == [[0, 1, 2]]
    assert not fetch.queue.pending
