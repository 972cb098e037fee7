"""A topic's life in one process, driven at random against the real broker: streams open (historical, live,
resumed), close, topics go idle and are evicted, come back; after every step, every open stream receives what
is produced next, in order, once. Then the stall watch: a stream that should receive and does not is noticed.

In-process (tests/support/inprocess.py): the real hub, fetcher, cache and pumps, a fake client connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import Producer
from django.conf import settings as django_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from bindings.selectors import START_HISTORICAL, START_LIVE
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.hub.hub import Hub
from streams.stream.pump import Pump
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.support.inprocess import FakeFlow, LoopThread, OpenStream, close_stream, new_hub, open_stream


@dataclass
class Tracked:
    stream: OpenStream
    topic: str
    first: int  # markers of the topic produced before it opened
    seen_before: frozenset[str] = frozenset()  # what the streams it resumed from received


@dataclass
class World:
    runner: LoopThread
    topics: list[tuple[str, int]]  # name, partitions
    produce: Produce


class Lifecycle(RuleBasedStateMachine):
    world: World

    def __init__(self) -> None:
        super().__init__()
        self.run = self.world.runner.run
        # idle_s short, so the janitor also evicts on its own between steps, as in a server
        self.hub: Hub = self.run(self._start_hub())
        self.open: list[Tracked] = []
        self.markers: dict[str, list[str]] = {name: [] for name, _ in self.world.topics}
        self.partition_of: dict[str, int] = {}
        self.index_of: dict[str, int] = {}
        self.count = 0
        self.example = uuid.uuid4().hex[:8]  # markers are unique across examples, which share the topics

    async def _start_hub(self) -> Hub:
        hub = new_hub(self.world.runner.loop, idle_s=1.0, stall_s=1.0)
        hub.start()
        return hub

    def teardown(self) -> None:
        for tracked in self.open:
            self.run(close_stream(tracked.stream))
        self.run(self.hub.stop())

    @rule(topic=st.integers(0, 1), start=st.sampled_from([START_HISTORICAL, START_LIVE]))
    def subscribe(self, topic: int, start: str) -> None:
        name = self.world.topics[topic][0]
        stream = self.run(open_stream(self.hub, name, start=start))
        self.open.append(Tracked(stream, name, len(self.markers[name])))

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def unsubscribe(self, data: st.DataObject) -> None:
        tracked = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        self.run(close_stream(tracked.stream))

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        """The client of a stream reconnects with the id of the last event it got."""
        tracked = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        last_id = tracked.stream.last_id
        self.run(close_stream(tracked.stream))
        if last_id is None:
            return
        stream = self.run(open_stream(self.hub, tracked.topic, last_event_id=last_id))
        seen = tracked.seen_before | frozenset(tracked.stream.values)
        self.open.append(Tracked(stream, tracked.topic, len(self.markers[tracked.topic]), seen))

    @rule()
    def idle_past_eviction(self) -> None:
        """Every topic nobody reads is dropped, as if its idle time had passed."""

        async def sweep() -> None:
            self.hub.sweep(now=time.monotonic() + 3600)

        self.run(sweep())

    @invariant()
    def every_open_stream_receives_what_is_produced_next(self) -> None:
        for name, partitions in self.world.topics:
            streams = [tracked for tracked in self.open if tracked.topic == name]
            if not streams:
                continue
            self.count += 1
            marker = f"{self.example}/{self.count}"
            self.world.produce(name, marker.encode(), partition=self.count % partitions)
            self.markers[name].append(marker)
            self.partition_of[marker], self.index_of[marker] = self.count % partitions, self.count
            wait_until(functools.partial(_all_received, marker, streams), timeout=5)
            for tracked in streams:
                self._check(tracked)
        assert self.hub.stalls.noticed == 0

    def _check(self, tracked: Tracked) -> None:
        """The contract: each partition's records in order, none lost since the stream (or the stream it resumed)
        opened, none repeated, across resumes too. History interleaves partitions, and a live stream may begin a
        moment before it opened (streams opening together share one watermark lookup)."""
        values = tracked.stream.values
        assert len(set(values)) == len(values), "an event was repeated"
        assert not set(values) & tracked.seen_before, "an event was repeated across a resume"
        mine = [value for value in values if value in self.partition_of]  # this example's markers
        lost = set(self.markers[tracked.topic][tracked.first :]) - set(mine)
        assert not lost, f"lost {sorted(lost)}"
        for partition in set(self.partition_of.values()):
            order = [self.index_of[value] for value in mine if self.partition_of[value] == partition]
            assert order == sorted(order), f"partition {partition} out of order"


def _all_received(marker: str, streams: list[Tracked]) -> bool:
    return all(marker in tracked.stream.values for tracked in streams)


def test_every_open_stream_receives_what_is_produced_next_through_any_lifecycle(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    class Machine(Lifecycle):
        world = World(loop_thread, [(new_topic(partitions=2), 2), (new_topic(), 1)], produce)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=12, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


def test_a_stream_that_receives_nothing_while_its_partition_grows_is_noticed(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    with running_hub(loop_thread, stall_s=0.5) as (hub, streams):
        stream = streams(topic, start=START_LIVE)
        produce(topic, b"before")
        wait_until(lambda: stream.values == ["before"])
        # The defect this watch is for: the consumer stops fetching a partition behind the fetcher's back.
        hub.fetcher.plain.send(("pause", [(topic, 0)]))  # to the consumer, not in the bookkeeping

        def noticed() -> bool:
            produce(topic, b"while stalled")
            return hub.stats()["stalled_streams"] == 1

        wait_until(noticed, timeout=10, interval=0.2)
        assert hub.stats()["stalls_noticed"] == 1
        received = len(stream.values)

        hub.fetcher.plain.send(("resume", [(topic, 0)]))
        wait_until(lambda: hub.stats()["stalled_streams"] == 0 and len(stream.values) > received, timeout=10)
        assert hub.stats()["stalls_noticed"] == 1


def test_a_client_that_does_not_read_or_a_quiet_topic_is_no_stall(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    busy, quiet = new_topic(), new_topic()
    with running_hub(loop_thread, stall_s=0.5) as (hub, streams):
        slow = streams(busy, start=START_LIVE)
        streams(quiet, start=START_LIVE)
        slow.flow.pause()  # its connection is full: the pump rightly waits
        deadline = time.monotonic() + 3  # six stall bounds
        while time.monotonic() < deadline:
            produce(busy, b"x")
            time.sleep(0.1)
        assert hub.stats()["stalls_noticed"] == 0
        assert slow.values == []
        slow.flow.resume()
        wait_until(lambda: len(slow.values) > 1)


def test_aborted_transactions_that_move_kafkas_end_with_nothing_to_deliver_are_no_stall(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    transactional = Producer({**django_settings.KAFKA.producer_config(), "transactional.id": f"tx-{uuid.uuid4().hex}"})
    transactional.init_transactions(10)
    with running_hub(loop_thread, stall_s=0.5) as (hub, streams):
        stream = streams(topic, start=START_LIVE)
        produce(topic, b"before")
        wait_until(lambda: stream.values == ["before"])  # at the end, as a live stream waits
        deadline = time.monotonic() + 3  # six stall bounds, Kafka's end moving all along
        while time.monotonic() < deadline:
            transactional.begin_transaction()
            transactional.produce(topic, b"aborted", partition=0)
            transactional.flush(10)
            transactional.abort_transaction(10)
            time.sleep(0.1)
        assert hub.stats()["stalls_noticed"] == 0
        produce(topic, b"after")
        wait_until(lambda: stream.values == ["before", "after"])


@contextlib.contextmanager
def running_hub(loop_thread: LoopThread, **options: float) -> Iterator[tuple[Hub, Callable[..., OpenStream]]]:
    """A started hub and a way to open streams on it; both closed at the end, whatever happened."""
    hub: Hub = loop_thread.run(_started(loop_thread, **options))
    opened: list[OpenStream] = []

    def stream(topic: str, **kwargs: str) -> OpenStream:
        opened.append(loop_thread.run(open_stream(hub, topic, **kwargs)))  # type: ignore[arg-type]
        return opened[-1]

    try:
        yield hub, stream
    finally:
        for each in opened:
            loop_thread.run(close_stream(each))
        loop_thread.run(hub.stop())


async def _started(loop_thread: LoopThread, **options: float) -> Hub:
    hub = new_hub(loop_thread.loop, **options)
    hub.start()
    return hub


def test_a_topic_evicted_while_a_stream_is_set_up_is_fetched_for_it(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """The janitor may drop a topic between a new stream's metadata lookup and its attach: the attach brings
    the topic back, cache window, fetch and all."""
    topic = new_topic()
    produce(topic, b"one")
    with running_hub(loop_thread) as (hub, streams):
        first = streams(topic)
        wait_until(lambda: first.values == ["one"])
        loop_thread.run(close_stream(first))

        async def set_up_across_an_eviction() -> OpenStream:
            state = await hub.topic(topic)
            positions = await hub.positions(state, resumed=None, start=START_HISTORICAL, since_ms=None)
            hub.sweep(now=time.monotonic() + 3600)  # the janitor runs while the stream is being set up
            assert topic not in hub.topics
            assert hub.cache.log(topic, 0) is None
            subscription = Subscription(
                positions.plan.progress, ends=positions.ends, starts=positions.starts, options=SubscriptionOptions()
            )
            flow = FakeFlow()
            pump = Pump(hub, state, subscription, positions.starts, send=_unused, flow=flow)  # type: ignore[arg-type]
            return OpenStream(pump, flow, asyncio.get_running_loop().create_task(pump.run(0)))

        second = loop_thread.run(set_up_across_an_eviction())
        try:
            wait_until(lambda: second.values == ["one"])
            produce(topic, b"two")
            wait_until(lambda: second.values == ["one", "two"])
            assert topic in hub.topics
        finally:
            loop_thread.run(close_stream(second))


async def _unused(message: object) -> None:
    raise AssertionError(message)
