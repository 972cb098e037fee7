"""The worker's Kafka consumers live in child processes (docs/decisions/0008-topic-deletion.md): when one dies,
whatever the broker, the streams of the process go on with nothing lost or repeated. In the test process (tests/
tests/support/inprocess.py): the real hub, fetcher, cache and broker; the child is killed as a crash inside librdkafka
would."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from streams.kafka.consumer_host import ConsumerHost
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.hub.test_hub_lifecycle import running_hub
from tests.support.inprocess import LoopThread, close_stream

LIVE = "live"


def test_a_dead_fetch_process_is_replaced_and_every_stream_goes_on(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    first, second = new_topic(partitions=2), new_topic()
    with running_hub(loop_thread) as (hub, streams):
        live = streams(first, start=LIVE)
        historical = streams(second)
        idle = streams(new_topic(), start=LIVE)
        loop_thread.run(close_stream(idle))  # its partition stays assigned, paused: assigned again paused
        produce(first, b"a0", partition=0)
        produce(first, b"a1", partition=1)
        produce(second, b"b0")
        wait_until(lambda: sorted(live.values) == ["a0", "a1"] and historical.values == ["b0"])
        dead = hub.fetcher.thread.pid
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        wait_until(lambda: hub.stats()["fetcher_restarts"] == 1 and hub.fetcher.thread.pid != dead)
        for index in range(2, 5):
            produce(first, b"a%d" % index, partition=index % 2)
            produce(second, b"b%d" % (index - 1))
        expected_first = ["a0", "a1", "a2", "a3", "a4"]
        wait_until(lambda: sorted(live.values) == expected_first and historical.values == ["b0", "b1", "b2", "b3"])
        assert hub.stats()["topics_deleted"] == 0
        assert hub.fetcher.thread.alive


def test_a_replay_whose_readers_process_dies_goes_on_from_where_it_was(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for index in range(600):
        produce(topic, b"%d" % index)
    with running_hub(loop_thread) as (_hub, streams):
        streams(topic, start=LIVE)  # opens the window at the end: offset 600
        replay = streams(topic)  # from offset 0: a historical reader, then the window
        replay.flow.pause()  # the replay waits for its client, its reader open
        wait_until(lambda: replay.pump.reader.replay.history is not None)
        host = ConsumerHost.get()
        os.kill(host.process.pid, signal.SIGKILL)
        wait_until(lambda: not host.alive)
        replay.flow.resume()
        wait_until(lambda: len(replay.values) >= 600, timeout=20)
        assert replay.values == [str(index) for index in range(600)]  # in order, none lost, none twice
        produce(topic, b"600")
        wait_until(lambda: replay.values[-1] == "600")
        assert len(replay.values) == 601
        assert ConsumerHost.get() is not host
