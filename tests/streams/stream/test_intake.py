"""What a stream's writes carry and how they are counted (streams/stream/intake.py), through the real hub,
fetcher, cache and broker in the test process (tests/support/inprocess.py): live or catching up, and a conflating
client that fell behind."""

from __future__ import annotations

from collections.abc import Callable

from streams.stream.intake import Standing
from streams.stream.pump import Phase
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.hub.test_hub_lifecycle import running_hub
from tests.support.delivery_log import CountingLog
from tests.support.inprocess import LoopThread

LIVE = "live"


def test_a_conflating_client_that_fell_behind_gets_the_latest_value_per_key(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    with running_hub(loop_thread) as (hub, streams):
        stream = streams(topic, start=LIVE, conflate=True)
        stream.flow.pause()
        for key, value in [(b"a", b"a1"), (b"b", b"b1"), (b"a", b"a2"), (b"a", b"a3")]:
            produce(topic, value, key=key)
        wait_until(lambda: hub.cache.log(topic, 0) is not None and hub.cache.log(topic, 0).next_offset == 4)  # type: ignore[union-attr]
        stream.flow.resume()
        wait_until(lambda: stream.values == ["b1", "a3"])
        produce(topic, b"a4", key=b"a")  # caught up: each update goes out again
        wait_until(lambda: stream.values == ["b1", "a3", "a4"])


def test_a_stream_counts_as_catching_up_until_it_has_read_to_the_live_end(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """History, then the window, is catch-up; from the first time the stream has nothing left to read, past
    Kafka's end as it was when it opened, what it gets is live. A stream that starts at the live end is live at
    once."""
    topic = new_topic()
    for index in range(20):
        produce(topic, b"%d" % index)
    log = CountingLog()
    with running_hub(loop_thread) as (_hub, streams):
        live = streams(topic, start=LIVE, log=log)  # opens the window at the end: offset 20
        wait_until(lambda: live.pump.phase is Phase.PARKED)
        assert live.pump.standing is Standing.LIVE
        replay = streams(topic, log=log)  # from offset 0: a historical reader, then the window
        wait_until(lambda: len(replay.values) == 20)
        wait_until(lambda: replay.pump.phase is Phase.PARKED)
        assert (replay.pump.standing, log.catchup, log.live) == (Standing.LIVE, 20, 0)
        for index in range(20, 23):
            produce(topic, b"%d" % index)
        wait_until(lambda: len(replay.values) == 23 and len(live.values) == 3)
        wait_until(lambda: log.live == 2 * 3)
        assert log.catchup == 20


def test_a_stream_that_starts_before_a_cold_window_is_catching_up_while_the_fetcher_fills_it(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """No stream of the process reads the topic: the window opens at the stream's start, in the past, and the
    fetcher's arrivals bring the old records through the fan-out. They are catch-up all the same: the stream
    waits (never parks where the fan-out writes to it) until it has passed Kafka's end as it was at its start."""
    topic = new_topic()
    for index in range(30):
        produce(topic, b"%d" % index)
    log = CountingLog()
    with running_hub(loop_thread) as (_hub, streams):
        replay = streams(topic, log=log)
        wait_until(lambda: len(replay.values) == 30)
        wait_until(lambda: replay.pump.standing is Standing.LIVE)
        assert (log.catchup, log.live) == (30, 0)
        produce(topic, b"30")
        wait_until(lambda: log.live == 1)
        assert replay.values[-1] == "30"
