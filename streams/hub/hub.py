"""The hub: one per web process, between the fetcher and the streams.

It knows each topic a stream of this process reads (partitions, cleanup policy, where the fetcher stands),
opens a cache window per partition on first use and has the fetcher read it from there, and wakes the
streams of a topic when records arrive. Partitions nobody reads are paused at once and dropped, cache and
all, after `SSE_TOPIC_IDLE_S` (bootstrap topics never are). Its janitor also runs the stall watch
(streams/hub/watchdog.py), and its topic watch (streams/hub/topic_watch.py) notices topics deleted and partitions added.

The hub assembles its collaborators and hands each what it uses: describing and growing topics
(streams/hub/descriptions.py), taking in what the fetcher reports (streams/hub/arrivals.py), deleted topics
(streams/hub/deletions.py), where a stream starts (streams/hub/start_finder.py). None of them imports the hub.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Mapping

from django.conf import settings

from config.kafka_settings import KafkaSettings
from streams.hub.arrivals import Arrivals
from streams.hub.cache import Cache
from streams.hub.deletions import Deletions
from streams.hub.descriptions import Descriptions
from streams.hub.start_finder import Positions, StartFinder
from streams.hub.topic_state import Subscriber, TopicState
from streams.hub.topic_watch import CHECK_S, TopicWatch
from streams.hub.watchdog import StallWatch
from streams.kafka.client import Metadata
from streams.kafka.consumer_host import ConsumerHost
from streams.kafka.decoding import Models
from streams.kafka.fetcher import Fetcher

log = logging.getLogger(__name__)

JANITOR_INTERVAL_S = 5.0
FANOUT_SHARE_FACTOR = 2.0  # a topic's fan-out waits this many times its last cost between writes (at least)
# ... and this many while many streams are opening (a reconnect storm, `Runtime.opening`): the live fan-out to the
# streams already back takes a ninth of the loop instead of half, and each of its writes carries more events.
FANOUT_STORM_FACTOR = 8.0


class Hub:
    def __init__(
        self,
        kafka: KafkaSettings,
        loop: asyncio.AbstractEventLoop,
        *,
        cache_bytes: int,
        idle_s: float,
        bootstrap: tuple[str, ...] = (),
        coalesce_s: float = 0.0,
        stall_s: float = 30.0,
    ) -> None:
        self.kafka, self.loop = kafka, loop
        self.fan_out = FanOut(loop, coalesce_s)
        self.metadata = Metadata(kafka)
        self.cache = Cache(cache_bytes)
        self.topics: dict[str, TopicState] = {}

        def paused(key: tuple[str, int]) -> bool:  # the fetcher, made just below, is handed the arrivals
            return self.fetcher.paused(key)

        self.arrivals = Arrivals(self.topics, self.cache, paused=paused, schedule=self.fan_out.schedule)
        self.fetcher = Fetcher(kafka, loop, self.arrivals.on_batch, on_lows=self.arrivals.on_lows)
        # takes the fetcher's word on lost consumers and unknown topics
        self.deletions = Deletions(self.topics, self.metadata, loop, forget=self.forget, reassign=self.fetcher.reassign)
        self.fetcher.on_restart, self.fetcher.on_errors = self.deletions.restarted, self.deletions.suspect
        self.descriptions = Descriptions(self.topics, self.metadata, current=self.deletions.current, open=self._open)
        self.watch = TopicWatch(self.topics, self.metadata, grow=self.descriptions.grow, suspect=self.deletions.suspect)
        self.starts = StartFinder(self.metadata, self.cache, loop)
        self._idle_s, self._bootstrap = idle_s, bootstrap
        self._janitor: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._janitor_interval = min(JANITOR_INTERVAL_S, idle_s / 2, stall_s / 2)
        self.stalls = StallWatch(stall_s)

    def start(self) -> None:
        self.fetcher.start()
        self._janitor = asyncio.get_running_loop().create_task(self._sweep(), name="hub-janitor")
        self._watching = asyncio.get_running_loop().create_task(self._watch(), name="hub-topic-watch")
        for topic in self._bootstrap:
            asyncio.get_running_loop().create_task(self.descriptions.warm(topic), name=f"hub-bootstrap:{topic}")

    async def stop(self) -> None:
        """Stop the janitor and the fetcher thread (a server process simply exits; tests run several hubs)."""
        tasks = [task for task in (self._janitor, self._watching) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(self.fetcher.stop)

    def decode_with(self, models: Models) -> None:
        """Decode records with `models` from now on, in the fetcher's consumer and in the historical readers'
        (streams/kafka/decoding.py). What the cache holds already stays as it was decoded."""
        self.fetcher.decode_with(models)
        ConsumerHost.decode_with(models)

    # --- topics -----------------------------------------------------------------------------------------

    async def topic(self, name: str) -> TopicState:
        """The topic's state, described once for any number of concurrent callers (streams/hub/descriptions.py)."""
        return await self.descriptions.topic(name)

    async def positions(
        self, state: TopicState, *, resumed: Mapping[int, int] | None, start: str, since_ms: int | None
    ) -> Positions:
        """Where a new stream starts (streams/hub/start_finder.py)."""
        return await self.starts.positions(state, resumed=resumed, start=start, since_ms=since_ms)

    # --- subscribers ------------------------------------------------------------------------------------

    def attach(self, state: TopicState, starts: Mapping[int, int], subscriber: Subscriber) -> TopicState:
        """Register a subscriber; returns the topic's state to use from now on."""
        # The janitor may have dropped the topic while this stream was being set up: register it again.
        self.topics.setdefault(state.name, state)
        state = self.topics[state.name]
        state.subscribers.add(subscriber)
        state.idle_since = None
        # Partitions added while this stream was set up (its starts come from the topic as it was): read them too.
        added = {p: state.low[p] for p in state.info.partitions if p not in starts and p in state.low}
        self._open(state, {**starts, **added})
        if added:
            subscriber.grow(added)
        return state

    def _open(self, state: TopicState, starts: Mapping[int, int]) -> None:
        for partition, offset in starts.items():
            if self.cache.log(state.name, partition) is None:
                self.cache.open(state.name, partition, offset)
                state.at_end.discard(partition)
                self.fetcher.assign(state.name, partition, offset)
        self.fetcher.resume(state.name, state.info.partitions)

    def detach(self, state: TopicState, subscriber: Subscriber) -> None:
        state.subscribers.discard(subscriber)
        self.stalls.forget(subscriber)
        if not state.subscribers and not state.bootstrap:
            state.idle_since = time.monotonic()
            self.fetcher.pause(state.name, state.info.partitions)
            # A paused partition is not fetched: its end and its start (records deleted, or past retention) may
            # move unseen, so the next stream asks Kafka where they are rather than the cache.
            state.at_end.difference_update(state.info.partitions)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_S)
            try:
                await self.watch.check()
            except Exception:
                log.warning("the topic watch could not describe the topics", exc_info=True)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self._janitor_interval)
            self.sweep()
            try:
                topics = [state for state in self.topics.values() if state.subscribers]
                now = self.loop.time()
                await self.stalls.check(topics, self.cache, self.metadata, now, self.fetcher.consumers.waiting)
            except Exception:
                log.exception("the stall check failed")

    def sweep(self, now: float | None = None) -> None:
        """Drop the topics nobody has read for `idle_s`: their partitions, cache windows and state."""
        now = time.monotonic() if now is None else now
        for state in list(self.topics.values()):
            state.reads.expire(self.loop.time())
            if state.idle_since is not None and not state.subscribers and now - state.idle_since > self._idle_s:
                self.forget(state.name)

    def forget(self, topic: str) -> TopicState | None:
        """Drop the topic from the process (deleted, or idle too long): its partitions, cache windows and state."""
        self.fetcher.forget(topic)
        self.cache.drop(topic)
        return self.topics.pop(topic, None)

    def stats(self) -> dict[str, int]:
        return {
            "kafka_consumers": len(self.fetcher.consumers.running),
            "fetch_streams": self.fetcher.fetch_streams,
            "subscriptions": sum(len(state.subscribers) for state in self.topics.values()),
            "cached_topics": len(self.topics),
            "cache_bytes": self.cache.bytes,
            "stalled_streams": self.stalls.stalled,
            "stalls_noticed": self.stalls.noticed,
            "fetcher_restarts": self.fetcher.consumers.restarts,
            **self.deletions.stats(),
        }


class FanOut:
    """Wakes a topic's streams when records arrive, coalesced per topic: at once after a quiet spell, else at the
    end of a `coalesce_s` window, so each write to a client carries everything that arrived meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop, coalesce_s: float) -> None:
        self.loop, self.coalesce_s = loop, coalesce_s
        # Whether many streams are opening (set by the process's runtime, streams/edge/runtime.py): the fan-out
        # then leaves them more of the loop.
        self.opens_waiting: Callable[[], bool] = lambda: False

    def schedule(self, state: TopicState) -> None:
        """Fan out now, or, on a topic busier than one batch per coalescing window, at the window's end: then one
        write to each client carries everything that arrived meanwhile."""
        if state.fanout is not None:
            return
        # A fan-out that holds the loop long (many clients) waits as long again before the next: the loop keeps
        # at least half its time for everything else (a storm of opens, other topics), and each client's write
        # carries more events instead of the loop falling behind with one write per client per batch.
        # While many streams are opening, it leaves them more: in a storm of 9 000 resumes at 40 records/s the
        # fan-out to the streams already back took a quarter to half of a worker's loop, one socket send per stream
        # per write, while the others waited (docs/benchmarks.md, "Storms on `make run`").
        factor = FANOUT_STORM_FACTOR if self.opens_waiting() else FANOUT_SHARE_FACTOR
        due = state.last_fanout + max(self.coalesce_s, factor * state.fanout_cost)
        if self.loop.time() >= due:
            self._write(state)
        else:
            state.fanout = self.loop.call_at(due, self._write, state)

    def _write(self, state: TopicState) -> None:
        """Each group of subscribers in the same position (same route options, same progress) has its events
        encoded once: the first of the group writes, the others write the same bytes."""
        state.fanout = None
        state.last_fanout = self.loop.time()
        started = time.perf_counter()
        try:
            self._write_groups(state)
        finally:
            state.fanout_cost = time.perf_counter() - started

    def _write_groups(self, state: TopicState) -> None:
        groups: dict[Hashable, list[Subscriber]] = {}
        for subscriber in list(state.subscribers):
            key = subscriber.share_key()
            if key is None:
                subscriber.notify()
                subscriber.account(1)
            elif (group := groups.get(key)) is not None:
                group.append(subscriber)
            else:
                groups[key] = [subscriber]
        for leader, *followers in groups.values():
            data = leader.notify()
            if data is None:  # the leader's task writes (and counts) for it: the others go their own way
                for follower in followers:
                    follower.notify()
                    follower.account(1)
                continue
            if followers:
                leader.share(followers, data)
            leader.account(1 + len(followers))


_hubs: dict[asyncio.AbstractEventLoop, Hub] = {}


def get_hub() -> Hub:
    """This process's hub (one per event loop), started on first use."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = Hub(
            settings.KAFKA,
            loop,
            cache_bytes=settings.SSE_CACHE_MAX_BYTES,
            idle_s=settings.SSE_TOPIC_IDLE_S,
            bootstrap=settings.SSE_BOOTSTRAP_TOPICS,
            coalesce_s=settings.SSE_COALESCE_MS / 1000,
            stall_s=settings.SSE_STALL_NOTICE_S,
        )
        hub.start()
    return hub


def current_hub() -> Hub | None:
    """The hub if one was started, without starting it (health checks)."""
    try:
        return _hubs.get(asyncio.get_running_loop())
    except RuntimeError:
        return None
