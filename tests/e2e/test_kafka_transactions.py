"""Transactions on a real Kafka broker, end to end (docs/contract.md §4, §5 `read_committed`, §7 `caught-up`).

Aborted records never reach a client; commit and abort markers take offsets but carry no event, so ids that
point at them resume at the next committed record and never hold `caught-up` back; a transaction still open
when a stream starts shows once it is committed, and never if aborted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec
from django.conf import settings

from streams.codecs.event_id import encode_progress
from tests.conftest import unique, wait_until
from tests.e2e.test_kafka_contract import kafka_admin, until_caught_up
from tests.e2e.test_zilla_scenarios import Produce, route, stream
from tests.support.sse_client import Event

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def transactional() -> Iterator[Callable[[], Producer]]:
    """Makes transactional producers, each with a transactional.id of its own."""
    made: list[Producer] = []

    def make() -> Producer:
        instance = Producer({**settings.KAFKA.producer_config(), "transactional.id": unique("tx")})
        instance.init_transactions(10)
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.flush(5)


def stable_end(topic: str, partition: int = 0) -> int:
    """Where read_committed readers stop now: before the first record of a transaction still open."""
    where = TopicPartition(topic, partition)
    latest: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    answer = kafka_admin().list_offsets({where: latest}, isolation_level=IsolationLevel.READ_COMMITTED)[where]
    return int(answer.result(timeout=10).offset)


def in_transaction(producer: Producer, topic: str, values: list[bytes]) -> list[int]:
    """Begin a transaction and write `values` to partition 0 in it; returns their offsets."""
    offsets: list[int] = []

    def report(err: object, msg: object) -> None:
        assert err is None, err
        offsets.append(msg.offset())  # type: ignore[attr-defined]

    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=report)
    producer.flush(10)
    assert len(offsets) == len(values)
    return offsets


def end_transaction(producer: Producer, topic: str, offsets: list[int], *, commit: bool) -> None:
    """Commit or abort, then wait for the marker: the coordinator writes it after the client's call returns."""
    if commit:
        producer.commit_transaction(10)
    else:
        producer.abort_transaction(10)
    wait_until(lambda: stable_end(topic) > offsets[-1] + 1)


def transaction(producer: Producer, topic: str, values: list[bytes], *, commit: bool) -> None:
    """One whole transaction, committed or aborted (its records reach the log either way)."""
    end_transaction(producer, topic, in_transaction(producer, topic, values), commit=commit)


def test_aborted_records_never_arrive_and_ids_resume_across_control_markers(
    daphne_url: str, new_topic: Callable[..., str], transactional: Callable[[], Producer]
) -> None:
    topic = new_topic()
    tx = transactional()
    transaction(tx, topic, [b"c0", b"c1"], commit=True)  # 0, 1; commit marker 2
    transaction(tx, topic, [b"x0", b"x1"], commit=False)  # 3, 4; abort marker 5
    transaction(tx, topic, [b"c2"], commit=True)  # 6; commit marker 7
    path = route(topic, caught_up=True)
    with stream(daphne_url + path) as s:
        *history, caught_up = until_caught_up(s)
        transaction(tx, topic, [b"c3"], commit=True)  # 8; 9
        transaction(tx, topic, [b"x2"], commit=False)  # 10; 11
        transaction(tx, topic, [b"c4"], commit=True)  # 12; 13
        live = s.events(2)
    assert [(e.text, e.id) for e in history] == [
        ("c0", encode_progress({0: 1})),
        ("c1", encode_progress({0: 2})),
        ("c2", encode_progress({0: 7})),
    ]
    assert caught_up.id == encode_progress({0: 7})
    assert [(e.text, e.id) for e in live] == [("c3", encode_progress({0: 9})), ("c4", encode_progress({0: 13}))]
    # Every id above points at a control marker or an aborted record: each resumes with the next committed one.
    for last_id, expected in (
        (encode_progress({0: 2}), ["c2", "c3", "c4"]),
        (encode_progress({0: 7}), ["c3", "c4"]),
        (encode_progress({0: 9}), ["c4"]),
        (encode_progress({0: 13}), []),
    ):
        with stream(daphne_url + path, **{"Last-Event-ID": last_id}) as s:
            *resumed, caught_up = until_caught_up(s)
        assert [e.text for e in resumed] == expected
        assert caught_up.id == encode_progress({0: 13})


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
def test_a_transaction_open_when_the_stream_starts_arrives_once_committed(
    daphne_url: str,
    new_topic: Callable[..., str],
    transactional: Callable[[], Producer],
    produce: Produce,
    commit: bool,
) -> None:
    topic = new_topic()
    first, second = transactional(), transactional()
    transaction(first, topic, [b"c0"], commit=True)  # 0; commit marker 1
    pending = in_transaction(second, topic, [b"o0", b"o1"])  # open: read_committed readers stop before it
    _, after = produce(topic, b"after")  # committed, but behind the open transaction
    with stream(daphne_url + route(topic, caught_up=True)) as s:
        *history, caught_up = until_caught_up(s)
        end_transaction(second, topic, pending, commit=commit)
        _, last = produce(topic, b"last")  # what the stream must show ends here
        rest: list[Event] = []
        while not rest or rest[-1].text != "last":
            rest.append(s.next_event())
    assert [(e.text, e.id) for e in history] == [("c0", encode_progress({0: 1}))]
    assert caught_up.id == encode_progress({0: 1})
    shown = [("o0", pending[0]), ("o1", pending[1])] if commit else []
    expected = [*shown, ("after", after), ("last", last)]
    assert [(e.text, e.id) for e in rest] == [(text, encode_progress({0: offset + 1})) for text, offset in expected]


def test_a_stream_reading_history_before_the_window_reaches_caught_up_past_a_control_marker(
    daphne_url: str, new_topic: Callable[..., str], transactional: Callable[[], Producer]
) -> None:
    # A live stream opens the process's window at the end (after the marker); the historical stream then reads
    # what lies before it from Kafka, where the last thing before the window is a marker, not a record.
    topic = new_topic()
    tx = transactional()
    transaction(tx, topic, [b"c0", b"c1"], commit=True)  # 0, 1; commit marker 2
    with stream(daphne_url + route(topic, start="live", caught_up=True)) as live:
        assert live.next_event().event == "caught-up"
        with stream(daphne_url + route(topic, caught_up=True)) as s:
            *history, caught_up = until_caught_up(s)
    assert [(e.text, e.id) for e in history] == [("c0", encode_progress({0: 1})), ("c1", encode_progress({0: 2}))]
    assert caught_up.id == encode_progress({0: 2})
