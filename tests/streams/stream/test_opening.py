"""How a stream opens (streams/stream/opening.py): where each partition starts, the subscription its route asks
for, and the delivery log's row of it. Against the real broker, through a real hub (tests/support/inprocess.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Producer

from bindings.selectors import EVENT_ID_KEY_AND_ETAG, START_LIVE, FilterSpec, RouteSpec
from streams.codecs.event_id import etag_id
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.hub.hub import Hub
from streams.kafka.client import Record
from streams.routes.matching import Match
from streams.stream.opening import Opened, guarded_identity, open_subscription, stream_row
from streams.telemetry.counters import StreamStats
from streams.telemetry.delivery_log import DeliveryLog
from streams.telemetry.delivery_schema import Start
from tests.e2e.test_zilla_scenarios import Produce
from tests.support.inprocess import LoopThread, new_hub


@contextmanager
def hub_on(loop_thread: LoopThread) -> Iterator[Hub]:
    async def started() -> Hub:
        hub = new_hub(loop_thread.loop)
        hub.start()
        return hub

    hub = loop_thread.run(started())
    try:
        yield hub
    finally:
        loop_thread.run(hub.stop())


def opened_on(
    loop_thread: LoopThread,
    hub: Hub,
    route: RouteSpec,
    *,
    params: dict[str, str] | None = None,
    resume: bytes | None = None,
    since_ms: int | None = None,
    stats: StreamStats | None = None,
) -> Opened:
    matched = Match(route, params or {})

    async def scenario() -> Opened:
        state = await hub.topic(matched.topic)
        return await open_subscription(hub, state, matched, resume, since_ms, stats=stats or StreamStats())

    return loop_thread.run(scenario())


def test_a_fresh_stream_of_a_historical_route_starts_at_each_partitions_first_offset(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(partitions=2)
    for value in (b"a", b"b", b"c"):
        produce(topic, value, partition=0)
    produce(topic, b"d", partition=1)
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic))
    assert opened.starts == {0: 0, 1: 0}
    assert (opened.start, opened.resets, opened.preamble) == (Start.FRESH, 0, b"")


def test_a_fresh_stream_of_a_live_route_starts_at_the_end(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for value in (b"a", b"b"):
        produce(topic, value)
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic, start=START_LIVE))
    assert opened.starts == {0: 2}
    assert opened.start is Start.FRESH


def test_a_resume_id_starts_where_it_left_off(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for value in (b"a", b"b", b"c", b"d"):
        produce(topic, value)
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic), resume=etag_id({0: 2}))
    assert opened.starts == {0: 2}
    assert (opened.start, opened.resets, opened.preamble) == (Start.RESUMED, 0, b"")
    out = opened.subscription.feed([Record(0, 2, None, b"c", ())])
    assert out == b"id:" + etag_id({0: 3}) + b"\ndata:c\n\n"  # ids go on from the resumed position


def test_a_resume_id_past_the_topics_end_is_reset_to_the_earliest_with_a_notice(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    produce(topic, b"a")
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic), resume=etag_id({0: 99}))
    assert opened.starts == {0: 0}
    assert (opened.start, opened.resets) == (Start.RESUMED, 1)
    assert b"event:reset\n" in opened.preamble
    assert b'"requested": 99, "earliest": 0' in opened.preamble


def test_a_malformed_resume_id_starts_fresh_and_is_counted(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    produce(topic, b"a")
    stats = StreamStats()
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic), resume=b"not-an-id", stats=stats)
    assert opened.starts == {0: 0}
    assert (opened.start, opened.resets) == (Start.MALFORMED, 0)
    assert stats.malformed_ids == 1


def test_since_starts_at_the_first_record_at_or_after_the_time(
    loop_thread: LoopThread, new_topic: Callable[..., str], producer: Producer
) -> None:
    topic = new_topic()
    now_ms = int(time.time() * 1000)
    for index, age_s in enumerate((60, 40, 20)):
        producer.produce(topic, value=b"%d" % index, partition=0, timestamp=now_ms - age_s * 1000)
    assert producer.flush(10) == 0
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic), since_ms=now_ms - 50_000)
        future = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic), since_ms=now_ms + 3_600_000)
    assert opened.starts == {0: 1}
    assert opened.start is Start.SINCE
    assert future.starts == {0: 3}  # nothing that late yet: the end


def test_the_routes_filters_are_filled_in_from_the_paths_params(
    loop_thread: LoopThread, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    route = RouteSpec("item", ("/items/{id}",), topic, filters=(FilterSpec(key="${params.id}"),))
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, route, params={"id": "a"})
    out = opened.subscription.feed([Record(0, 0, b"a", b"mine", ()), Record(0, 1, b"b", b"theirs", ())])
    assert b"data:mine" in out
    assert b"theirs" not in out


def test_the_id_form_and_compaction_follow_the_route_and_the_topic(
    loop_thread: LoopThread, new_topic: Callable[..., str]
) -> None:
    compacted = new_topic(config={"cleanup.policy": "compact"})
    plain = new_topic()
    with hub_on(loop_thread) as hub:
        keyed = opened_on(loop_thread, hub, RouteSpec("c", ("/c",), compacted, event_id=EVENT_ID_KEY_AND_ETAG))
        etag = opened_on(loop_thread, hub, RouteSpec("p", ("/p",), plain))
    assert (keyed.subscription.options.key_form, keyed.subscription.options.compacted) == (True, True)
    assert (etag.subscription.options.key_form, etag.subscription.options.compacted) == (False, False)


def test_a_caught_up_route_on_an_empty_topic_says_so_before_any_record(
    loop_thread: LoopThread, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    with hub_on(loop_thread) as hub:
        opened = opened_on(loop_thread, hub, RouteSpec("items", ("/items",), topic, caught_up=True))
    assert b"event:caught-up\n" in opened.preamble


def opened_record(start: Start = Start.FRESH, resets: int = 0) -> Opened:
    subscription = Subscription({}, ends={}, starts={}, options=SubscriptionOptions())
    return Opened(subscription, {}, b"", start, resets)


def scope(client: str = "10.0.0.7", user_agent: bytes = b"Mozilla/5.0 Chrome/120.0 Safari/537.36") -> dict[str, Any]:
    return {"client": (client, 50000), "headers": [(b"user-agent", user_agent)]}


def test_the_delivery_logs_row_keeps_identities_and_addresses_only_as_keyed_hashes() -> None:
    delivery = DeliveryLog(None, salt=b"salt")
    route = RouteSpec("items", ("/items/{id}",), "items-${params.id}")
    matched = Match(route, {"id": "7"}, {"jwt": {"identity": "alice"}})
    row = stream_row(delivery, scope(), matched, "/items/7", opened=opened_record(Start.RESUMED, 2))
    assert (row.route, row.endpoint, row.topic, row.path) == ("items", "default", "items-7", "/items/7")
    assert row.identity == delivery.keyed_hash("alice") != "alice"
    assert row.client == delivery.keyed_hash("10.0.0.7") != "10.0.0.7"
    assert (row.user_agent, row.start, row.resets) == ("chrome", Start.RESUMED, 2)


def test_an_unguarded_streams_row_has_no_identity_and_a_missing_client_is_hashed_too() -> None:
    delivery = DeliveryLog(None, salt=b"salt")
    matched = Match(RouteSpec("items", ("/items",), "items"), {})
    row = stream_row(delivery, {"headers": []}, matched, "/items", opened=opened_record())
    assert row.identity is None
    assert row.client == delivery.keyed_hash("")
    assert row.user_agent == "none"


def test_the_identity_is_the_first_a_guard_found() -> None:
    route = RouteSpec("items", ("/items",), "items")
    assert guarded_identity(Match(route, {}, {"api": {"attributes.org": "x"}, "jwt": {"identity": "bob"}})) == "bob"
    assert guarded_identity(Match(route, {}, {"jwt": {"identity": ""}})) is None
    assert guarded_identity(Match(route, {})) is None
