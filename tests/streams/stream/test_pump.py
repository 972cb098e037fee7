"""The pump and the hub's fan-out in the test process (tests/support/inprocess.py): the real hub, fetcher, cache and
broker, a fake client connection whose fullness the test sets."""

from __future__ import annotations

import functools
from collections.abc import Callable

from bindings.selectors import FilterSpec
from streams.codecs import sse
from streams.events.subscription import Position
from streams.hub.shared_reads import Read, SharedReads
from streams.kafka.client import ReaderStats
from streams.routes.filters import compile_filters
from streams.stream.intake import Standing
from streams.stream.pump import Phase
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.hub.test_hub_lifecycle import running_hub
from tests.support.delivery_log import CountingLog
from tests.support.inprocess import LoopThread, OpenStream
from tests.support.sse_client import Event

LIVE = "live"


def test_a_client_that_stays_full_and_falls_behind_is_closed(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        stream = streams(topic, start=LIVE)
        stream.pump.policy.max_pending, stream.pump.policy.stall_grace_s = 2000, 0.0
        stream.flow.pause()
        for index in range(5):
            produce(topic, b"%d" % index + b"x" * 1000)
        wait_until(lambda: stream.flow.closed, timeout=10)
        assert stream.pump.policy.stats.closed_slow == 1
        assert stream.values == []  # nothing went to a full connection


def test_a_full_client_within_its_bound_waits_and_then_gets_everything(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    with running_hub(loop_thread) as (hub, streams):
        stream = streams(topic, start=LIVE)
        stream.flow.pause()
        for index in range(3):
            produce(topic, b"%d" % index)
        wait_until(lambda: hub.cache.log(topic, 0) is not None and hub.cache.log(topic, 0).next_offset == 3)  # type: ignore[union-attr]
        assert stream.values == []
        stream.flow.resume()
        wait_until(lambda: stream.values == ["0", "1", "2"])
        assert not stream.flow.closed


def test_history_older_than_the_window_is_read_and_handed_over_to_it(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for index in range(20):
        produce(topic, b"%d" % index)
    with running_hub(loop_thread) as (_hub, streams):
        live = streams(topic, start=LIVE)  # opens the window at the end: offset 20
        replay = streams(topic)  # from offset 0: a historical reader, then the window
        wait_until(lambda: replay.values == [str(index) for index in range(20)])
        wait_until(lambda: replay.pump.reader.replay.history is None)  # handed over: its reader is closed
        produce(topic, b"20")
        wait_until(lambda: replay.values[-1] == "20" and live.values == ["20"])
        assert len(replay.values) == 21
    assert ReaderStats.historical_readers == 0


def test_a_quiet_stream_gets_a_keepalive_comment(loop_thread: LoopThread, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        stream = streams(topic, start=LIVE, keepalive=1)
        wait_until(lambda: bytes(stream.flow.data).count(sse.KEEPALIVE) >= 2, timeout=5)
        assert stream.values == []


def test_streams_in_the_same_position_share_one_encoding_of_a_batch(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """The fan-out groups pumps by share key: one reads and encodes, the others write the same bytes."""
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        same = [streams(topic, start=LIVE) for _ in range(3)]
        only_k = compile_filters([FilterSpec(key="k")], {})
        filtered = streams(topic, start=LIVE, filters=only_k)
        produce(topic, b"first")
        wait_until(lambda: all(stream.values == ["first"] for stream in same))
        wait_until(
            lambda: all(stream.pump.phase is Phase.PARKED for stream in [*same, filtered])
        )  # parked: the hub writes
        feeds = count_feeds([*same, filtered])
        produce(topic, b"second", key=b"k")
        wait_until(lambda: all(stream.values == ["first", "second"] for stream in same))
        wait_until(lambda: filtered.values == ["second"])
        assert {bytes(stream.flow.data) for stream in same} == {bytes(same[0].flow.data)}
        assert sum(1 for stream in same if feeds[id(stream)]) == 1  # one of the three encoded, the others adopted
        assert feeds[id(filtered)] >= 1  # other options: a group of its own


def test_a_parked_streams_share_key_follows_its_position_when_its_topic_grows(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """A parked pump keeps its share key between fan-outs (the hub's writes alone move it): partitions added to
    the topic move it too, so it no longer groups with, and takes the position of, pumps without them."""
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        stream = streams(topic, start=LIVE)
        produce(topic, b"first")
        wait_until(lambda: stream.values == ["first"] and stream.pump.phase is Phase.PARKED)

        async def grow() -> tuple[object, object]:
            pump = stream.pump
            before = pump.share_key()
            pump.grow({**pump.cursors, 99: 0})  # as the hub does when the topic gains partitions
            return before, pump.share_key()

        before, after = loop_thread.run(grow())
        assert before is not None
        assert after != before


def test_an_event_of_a_parked_streams_own_goes_out_before_the_next_batch(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """An event the stream injects (a challenge) leaves the pump parked no more: the hub stops writing to it
    directly (its share key is None at once), so its task writes the event before anything read after it."""
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        same = parked_in_one_position(streams, topic, produce)

        async def inject() -> tuple[object, Phase, object]:
            pump = same[0].pump
            pump.inject(OWN)
            return pump.share_key(), pump.phase, same[1].pump.share_key()

        key, phase, other = loop_thread.run(inject())
        assert (key, phase) == (None, Phase.WORKING)
        assert other is not None  # the others still share
        produce(topic, b"second")
        wait_until(lambda: all(s.values[-1:] == ["second"] for s in same))
        data = bytes(same[0].flow.data)
        assert data.index(OWN) < data.index(b"second")
        assert OWN not in bytes(same[1].flow.data)
        wait_until(lambda: same[0].pump.phase is Phase.PARKED)  # back in the group once the event is out


def test_a_follower_takes_the_position_of_shared_writes_when_it_next_needs_it(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """The followers of a fan-out's shared writes leave their readers as they are, and only hold where the
    leader stood after each write: their cursors and delivered counts say so at once, and a follower whose
    task runs again (an event of its own) takes that position first, then goes on with the right ids."""
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        same = parked_in_one_position(streams, topic, produce)
        for value in ("a", "b", "c"):
            produce(topic, value.encode())
            wait_until(functools.partial(all_end_with, same, value))

        async def look() -> list[tuple[bool, dict[int, int], dict[int, int], int, int]]:
            return [(s.pump.lead is not None, s.pump.cursors, s.pump.reader.cursors, s.pump.delivered,
                     s.pump.subscription.delivered) for s in same]  # fmt: skip

        seen = loop_thread.run(look())
        followers = [i for i, (lazy, *_) in enumerate(seen) if lazy]
        assert followers, "a fan-out to three parked streams in one position has followers"
        assert all(cursors == seen[0][1] and delivered == 4 for _, cursors, _, delivered, _ in seen)
        assert all(reader != cursors and taken < 4 for _, cursors, reader, _, taken in (seen[i] for i in followers))

        follower = same[followers[0]]
        loop_thread.run(_run(follower.pump.inject, OWN))  # its task runs: it takes the position first
        wait_until(lambda: follower.pump.phase is Phase.PARKED and OWN in bytes(follower.flow.data))
        assert loop_thread.run(look())[followers[0]][:3] == (False, seen[0][1], seen[0][1])
        produce(topic, b"d")

        def records() -> list[list[Event]]:
            return [[e for e in s.events if e.id] for s in same]  # the challenge has no id

        wait_until(lambda: all([e.text for e in r] == ["first", "a", "b", "c", "d"] for r in records()))
        assert len({tuple(e.id for e in r) for r in records()}) == 1  # the same ids: no gap, nothing again
        assert loop_thread.run(look())[followers[0]][3] == 5


OWN = b"event: challenge\ndata: {}\n\n"  # an event of a stream's own, as a challenge is


def parked_in_one_position(streams: Callable[..., OpenStream], topic: str, produce: Produce) -> list[OpenStream]:
    """Three live streams that read one record each and parked, all in the same position."""
    same = [streams(topic, start=LIVE) for _ in range(3)]
    produce(topic, b"first")
    wait_until(lambda: all(s.values == ["first"] and s.pump.phase is Phase.PARKED for s in same))
    return same


def all_end_with(streams: list[OpenStream], value: str) -> bool:
    return all(stream.values[-1:] == [value] for stream in streams)


async def _run(call: Callable[..., object], *args: object) -> None:
    call(*args)


def count_feeds(streams: list[OpenStream]) -> dict[int, int]:
    """Count each stream's `Subscription.feed` calls from now on."""
    counts = dict.fromkeys((id(stream) for stream in streams), 0)
    for stream in streams:
        subscription = stream.pump.subscription
        original = subscription.feed

        def feed(
            *args: object, _original: Callable[..., bytes] = original, _key: int = id(stream), **kw: object
        ) -> bytes:
            counts[_key] += 1
            return _original(*args, **kw)

        subscription.feed = feed  # type: ignore[method-assign]
    return counts


def test_streams_resuming_from_the_same_id_share_their_catch_up_reads(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """A reconnect storm: many clients resume from one Last-Event-ID. The first reads and encodes what they
    missed; the others take that read, bytes, position and all, and every one goes on alike."""
    topic = new_topic()
    with running_hub(loop_thread) as (hub, streams):
        live, resume_from = missed_after_first(streams, topic, produce, missed=5)
        reads = hub.topics[topic].reads
        assert len(reads) == 0  # the live stream was written to by the fan-out, not by catch-up reads
        log = CountingLog()
        resumed = [streams(topic, last_event_id=resume_from, log=log) for _ in range(5)]
        wait_until(lambda: all(stream.values == ["1", "2", "3", "4", "5"] for stream in resumed))
        assert {tuple(e.id for e in stream.events) for stream in resumed} == {tuple(e.id for e in live.events[1:])}
        assert reads.hits == 4  # the first read, the other four took it
        assert all(stream.pump.delivered == 5 for stream in resumed)
        wait_until(lambda: log.events == 5 * 5)  # the takers are counted too, each event once per client
        assert log.catchup == 5 * 5  # all of it catching up
        wait_until(lambda: all(stream.pump.standing is Standing.LIVE for stream in resumed))
        produce(topic, b"6")  # and each goes on from where the shared read left it
        wait_until(lambda: all(stream.values[-1] == "6" and len(stream.values) == 6 for stream in resumed))
        assert {stream.last_id for stream in resumed} == {live.last_id}
        # Caught up: the new event is no catch-up (whether the fan-out group counts it depends on which stream
        # leads it: the first stream, with them in one position, logs nothing).
        assert log.catchup == 5 * 5


def test_a_stream_that_logs_does_not_take_the_read_of_one_that_logs_nothing(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """A read by a stream without a delivery log keeps no batch: a stream with one reads (and counts) for itself."""
    topic = new_topic()
    with running_hub(loop_thread) as (_hub, streams):
        _live, resume_from = missed_after_first(streams, topic, produce, missed=3)
        unlogged = streams(topic, last_event_id=resume_from)
        wait_until(lambda: unlogged.values == ["1", "2", "3"])
        log = CountingLog()
        logged = streams(topic, last_event_id=resume_from, log=log)
        wait_until(lambda: logged.values == ["1", "2", "3"])
        wait_until(lambda: log.events == 3)


def missed_after_first(
    streams: Callable[..., OpenStream], topic: str, produce: Produce, *, missed: int
) -> tuple[OpenStream, str | None]:
    """A live stream that got record "0" and then `missed` more ("1", ...); returns it and the id just after "0"."""
    live = streams(topic, start=LIVE)
    produce(topic, b"0")
    wait_until(lambda: live.values == ["0"])
    resume_from = live.last_id
    for index in range(1, missed + 1):
        produce(topic, b"%d" % index)
    wait_until(lambda: len(live.values) == missed + 1)
    return live, resume_from


def test_a_kept_read_expires_and_the_reads_stay_within_their_budget() -> None:
    reads = SharedReads(max_bytes=1000, keep_s=10.0)
    position = Position({0: 1}, {0: b"\x00\x02"}, None)

    def read(at: float, size: int) -> Read:
        return Read(at, "route", "topic", b"x" * size, {0: 1}, position, 1, (), None)

    reads.put("a", read(0.0, 400))
    reads.put("b", read(1.0, 400))
    assert reads.get("a", 5.0) is not None
    reads.put("c", read(2.0, 400))  # over budget: the oldest goes
    assert reads.get("a", 5.0) is None
    assert reads.get("b", 5.0) is not None
    assert reads.bytes == 800
    assert reads.get("b", 11.5) is None  # older than keep_s: not given out
    reads.expire(11.5)
    assert len(reads) == 1  # "c" (read at 2.0) is still fresh
    assert reads.bytes == 400
    reads.put("d", read(20.0, 2000))  # bigger than the whole budget: not kept
    assert reads.get("d", 20.0) is None
