"""streams/events/conflation.py through a subscription (no broker): at most one event per key per interval, the
latest value of that key, tombstones included; ids move past what waits (docs/contract.md §7)."""

from __future__ import annotations

from streams.codecs.event_id import OFFSET_EARLIEST, encode_progress
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.kafka.client import Record
from tests.streams.events.test_subscription import events


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def conflating(clock: Clock, interval_ms: int = 1000) -> Subscription:
    options = SubscriptionOptions(conflate_ms=interval_ms)
    return Subscription({0: OFFSET_EARLIEST}, ends={0: 0}, starts={0: 0}, options=options, clock=clock)


def rec(offset: int, value: bytes | None, key: bytes | None = b"k") -> Record:
    return Record(0, offset, key, value, ())


def test_a_key_goes_at_once_then_its_latest_value_once_the_interval_is_over() -> None:
    clock = Clock()
    sub = conflating(clock)
    first = events(sub.feed([rec(n, b"v%d" % n) for n in range(5)]))
    assert [(e.id, e.text) for e in first] == [(encode_progress({0: 1}), "v0")]
    assert sub.next_due() == 101.0
    clock.now = 100.5
    assert sub.feed(()) == b""
    assert events(sub.feed([rec(5, b"v5")])) == []
    clock.now = 101.0
    later = events(sub.feed(()))
    assert [(e.id, e.text) for e in later] == [(encode_progress({0: 6}), "v5")]  # the id moved past all of them
    assert sub.next_due() is None
    clock.now = 101.2
    assert events(sub.feed([rec(6, b"v6")])) == []  # within the interval of the last send
    assert sub.next_due() == 102.0


def test_keys_wait_apart_a_tombstone_is_a_value_and_records_without_a_key_always_go() -> None:
    clock = Clock()
    sub = conflating(clock)
    batch = [rec(0, b"a0", b"a"), rec(1, b"b0", b"b"), rec(2, b"a1", b"a"), rec(3, None, b"b"), rec(4, b"x", None)]
    assert [e.text for e in events(sub.feed(batch))] == ["a0", "b0", "x"]
    clock.now = 101.0
    released = events(sub.feed([rec(5, b"c0", b"c")]))  # what waited goes before what is newer
    assert [(e.event, e.text) for e in released] == [(None, "a1"), ("delete", "Yg=="), (None, "c0")]


def test_a_conflating_subscription_never_shares_its_writes() -> None:
    clock = Clock()
    sub = conflating(clock)
    assert not sub.settled
    plain = Subscription({0: OFFSET_EARLIEST}, ends={0: 0}, starts={0: 0}, options=SubscriptionOptions())
    assert plain.settled
