"""Records to SSE bytes: filters, key-form ids, compaction snapshot, caught-up (no broker involved)."""

from __future__ import annotations

import json
import sys

from bindings.selectors import FilterSpec, ValueFilterSpec
from streams.codecs.event_id import OFFSET_EARLIEST, encode_progress
from streams.events.start_plan import Reset
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.kafka.client import Record
from streams.routes.filters import compile_filters
from tests.support.sse_client import Event, parse_block


def rec(partition: int, offset: int, value: bytes | None, key: bytes | None = None, **headers: bytes) -> Record:
    return Record(partition, offset, key, value, tuple(headers.items()))


def events(data: bytes) -> list[Event]:
    return [parse_block(block) for block in data.split(b"\n\n") if block]


def subscription(ends: dict[int, int], **options: object) -> Subscription:
    progress = dict.fromkeys(ends, OFFSET_EARLIEST)
    return Subscription(progress, ends=ends, starts=dict.fromkeys(ends, 0), options=SubscriptionOptions(**options))  # type: ignore[arg-type]


def test_ids_carry_every_partition() -> None:
    sub = subscription({0: 0, 1: 0})
    out = events(sub.feed([rec(0, 1, b"a"), rec(1, 0, b"b"), rec(0, 2, b"c")]))
    assert [(e.id, e.text) for e in out] == [("AQQABAID", "a"), ("AQQABAIC", "b"), ("AQQABgIC", "c")]


def test_key_form_ids_are_json_with_the_etag_header() -> None:
    sub = subscription({0: 0, 1: 0}, key_form=True)
    out = events(sub.feed([rec(0, 1, b"x", b"key", etag=b"revision=42")]))
    assert json.loads(out[0].id or "") == ["a2V5", "AQQABAID/revision=42"]


def test_filters_skip_records_but_ids_still_advance() -> None:
    filters = compile_filters([FilterSpec(key="${params.id}")], {"id": "k1"})
    sub = subscription({0: 0}, filters=filters)
    out = events(sub.feed([rec(0, 0, b"no", b"k2"), rec(0, 1, b"yes", b"k1")]))
    assert [(e.id, e.text) for e in out] == [(encode_progress({0: 2}), "yes")]


def test_a_filter_needs_the_key_and_every_header_and_any_filter_will_do() -> None:
    filters = compile_filters(
        [FilterSpec(key="k", headers=(("tag", "a"), ("zone", "eu"))), FilterSpec(headers=(("tag", "b"),))], {}
    )
    sub = subscription({0: 0}, filters=filters)
    batch = [
        rec(0, 0, b"1", b"k", tag=b"a"),  # zone missing
        rec(0, 1, b"2", b"k", tag=b"a", zone=b"eu"),  # first filter
        rec(0, 2, b"3", b"other", tag=b"b"),  # second filter
        rec(0, 3, b"4", b"k", tag=b"c", zone=b"eu"),
    ]
    assert [e.text for e in events(sub.feed(batch))] == ["2", "3"]


def test_value_filters_match_a_json_field_and_and_with_the_key() -> None:
    filters = compile_filters([FilterSpec(key="k", value=ValueFilterSpec("item.status", "${params.s}"))], {"s": "open"})
    sub = subscription({0: 0}, filters=filters)
    batch = [
        rec(0, 0, b'{"item": {"status": "open"}}', b"k"),
        rec(0, 1, b'{"item": {"status": "closed"}}', b"k"),
        rec(0, 2, b'{"item": {"status": "open"}}', b"other"),
        rec(0, 3, b"not json", b"k"),
        rec(0, 4, b'{"item": "open"}', b"k"),
        rec(0, 5, None, b"k"),
    ]
    assert [e.id for e in events(sub.feed(batch))] == [encode_progress({0: 1})]


def test_value_filters_compare_numbers_and_booleans_by_their_json_text() -> None:
    filters = compile_filters(
        [FilterSpec(value=ValueFilterSpec("n", "3")), FilterSpec(value=ValueFilterSpec("b", "true"))], {}
    )
    sub = subscription({0: 0}, filters=filters)
    batch = [rec(0, 0, b'{"n": 3}'), rec(0, 1, b'{"n": 4}'), rec(0, 2, b'{"b": true}'), rec(0, 3, b'{"n": "3"}')]
    assert [e.text for e in events(sub.feed(batch))] == ['{"n": 3}', '{"b": true}', '{"n": "3"}']


def test_a_compacted_topic_sends_the_latest_value_per_key_then_every_live_update() -> None:
    sub = subscription({0: 5}, compacted=True)
    snapshot = [rec(0, 0, b"a1", b"a"), rec(0, 1, b"b1", b"b"), rec(0, 2, b"a2", b"a"), rec(0, 3, None, b"b")]
    assert sub.feed(snapshot) == b""  # held back until the partition reaches its end as of subscribe
    out = events(sub.feed([rec(0, 4, b"c1", b"c"), rec(0, 5, b"a3", b"a"), rec(0, 6, b"a4", b"a")]))
    assert [(e.event, e.text) for e in out] == [
        (None, "a2"), ("delete", "Yg=="), (None, "c1"), (None, "a3"), (None, "a4")
    ]  # fmt: skip
    assert out[0].id == encode_progress({0: 3})


def test_a_compacted_snapshot_is_flushed_when_the_partition_reports_its_end() -> None:
    # Control records (transaction markers) take offsets without being delivered: the end comes as EOF.
    sub = subscription({0: 4}, compacted=True)
    assert sub.feed([rec(0, 0, b"x1", b"x"), rec(0, 1, b"x2", b"x")]) == b""
    assert [e.text for e in events(sub.feed([], eof=[0]))] == ["x2"]


def test_null_keys_never_supersede_each_other() -> None:
    sub = subscription({0: 2}, compacted=True)
    assert [e.text for e in events(sub.feed([rec(0, 0, b"n1"), rec(0, 1, b"n2")]))] == ["n1", "n2"]


def test_caught_up_comes_once_when_every_partition_reached_its_end() -> None:
    sub = subscription({0: 2, 1: 1}, caught_up=True)
    assert sub.preamble([]) == b""
    first = events(sub.feed([rec(0, 0, b"a"), rec(0, 1, b"b")]))
    assert [e.event for e in first] == [None, None]
    second = events(sub.feed([rec(1, 0, b"c")]))
    assert [(e.event, e.id) for e in second] == [(None, "AQQABAIC"), ("caught-up", "AQQABAIC")]
    assert events(sub.feed([rec(1, 1, b"d")]))[-1].event is None


def test_caught_up_comes_at_once_for_an_empty_topic() -> None:
    sub = subscription({0: 0}, caught_up=True)
    assert [e.event for e in events(sub.preamble([]))] == ["caught-up"]


def test_the_reset_notice_names_the_partitions_and_carries_an_id() -> None:
    progress = {0: 100, 1: 3}
    sub = Subscription(progress, ends={0: 200, 1: 50}, starts=progress, options=SubscriptionOptions())
    (event,) = events(sub.preamble([Reset(partition=0, requested=42, earliest=100)]))
    assert event.event == "reset"
    assert json.loads(event.text) == {"partitions": [{"partition": 0, "requested": 42, "earliest": 100}]}
    assert event.id == encode_progress(progress)


def test_partitions_added_are_listed_at_minus_two_and_delivered_as_they_come_even_when_compacted() -> None:
    sub = subscription({0: 2}, compacted=True, caught_up=True)
    assert events(sub.feed([rec(0, 0, b"old", b"k"), rec(0, 1, b"new", b"k")]))[0].text == "new"  # the snapshot
    sub.grow([1, 0])  # a partition it reads already is left as it is
    out = events(sub.feed([rec(0, 2, b"a", b"k")]))
    assert [(e.id, e.text) for e in out] == [(encode_progress({0: 3, 1: OFFSET_EARLIEST}), "a")]
    # The new partition's records are newer than the subscription: no snapshot holds them back.
    out = events(sub.feed([rec(1, 0, b"b", b"k"), rec(1, 1, b"c", b"k")]))
    assert [(e.id, e.text) for e in out] == [(encode_progress({0: 3, 1: 1}), "b"), (encode_progress({0: 3, 1: 2}), "c")]


def test_once_every_partition_reached_its_end_the_ends_are_let_go_and_it_delivers_as_before() -> None:
    live = Subscription({0: 5, 1: 7}, ends={0: 5, 1: 7}, starts={0: 5, 1: 7}, options=SubscriptionOptions())
    behind = subscription({0: 2, 1: 1})
    assert live.reached_ends
    assert not behind.reached_ends
    # An open stream at the live end holds no ends (a dict and a set for as long as it is open) ...
    assert containers_size(live) <= containers_size(behind) - 400  # bytes: 512 against 1 080
    # ... and still delivers every record, and grows.
    assert [e.text for e in events(live.feed([rec(0, 5, b"a"), rec(1, 7, b"b")]))] == ["a", "b"]
    live.grow([2])
    assert [(e.id, e.text) for e in events(live.feed([rec(2, 0, b"c")]))] == [
        (encode_progress({0: 6, 1: 8, 2: 1}), "c")
    ]
    assert live.reached_ends


def containers_size(sub: Subscription) -> int:
    """The bytes of the subscription's own containers (its ends, what it reached and what it holds back)."""
    return sum(sys.getsizeof(part) for part in vars(sub).values() if isinstance(part, (dict, set)))


def test_subscriptions_that_begin_in_one_place_share_it_until_one_moves() -> None:
    # Idle streams at a topic's end hold one pair of progress dicts between them (docs/benchmarks.md, "Memory per
    # idle stream"); the first to deliver takes copies, and the others' ids stay where they were.
    first, second = subscription({0: 0, 1: 0}), subscription({0: 0, 1: 0})
    assert first.progress is second.progress
    first.feed([], eof=[0, 1])  # reaching the ends moves nothing: nothing copied
    assert first.progress is second.progress
    assert [e.id for e in events(first.feed([rec(0, 0, b"a")]))] == [encode_progress({0: 1, 1: OFFSET_EARLIEST})]
    assert first.progress == {0: 1, 1: OFFSET_EARLIEST}
    assert second.progress == {0: OFFSET_EARLIEST, 1: OFFSET_EARLIEST}
    assert [e.id for e in events(second.feed([rec(1, 0, b"b")]))] == [encode_progress({0: OFFSET_EARLIEST, 1: 1})]
    third = subscription({0: 0, 1: 0})
    assert third.progress == {0: OFFSET_EARLIEST, 1: OFFSET_EARLIEST}  # the beginning kept was not moved


def test_a_subscription_that_took_a_standpoint_copies_it_before_moving() -> None:
    leader, follower = subscription({0: 0}), subscription({0: 0})
    leader.feed([rec(0, 0, b"a")])
    standpoint = leader.standpoint()
    follower.adopt(standpoint, 1)
    assert follower.progress is standpoint.progress
    leader.feed([rec(0, 1, b"b")])
    follower.feed([rec(0, 1, b"b"), rec(0, 2, b"c")])
    assert standpoint.progress == {0: 1}  # handed out: neither changed it in place
    assert (leader.progress, follower.progress) == ({0: 2}, {0: 3})
