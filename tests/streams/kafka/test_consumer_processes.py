"""The worker's Kafka consumers live in child processes (docs/decisions/0008-topic-deletion.md): when one dies,
whatever the broker, the streams of the process go on with nothing lost or repeated. In the test process (tests/
tests/support/inprocess.py): the real hub, fetcher, cache and broker; the child is killed as a crash inside librdkafka
would."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable

from streams.codecs.schemas import CatalogSpec, InlineSchema, ModelSpec, TopicModels
from streams.hub.hub import Hub
from streams.kafka.consumer_host import ConsumerHost
from streams.kafka.decoder_process import Slot
from streams.kafka.decoding import Budgets, DecodeStats, Models
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
        dead = hub.fetcher.plain.pid
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        wait_until(lambda: hub.stats()["fetcher_restarts"] == 1 and hub.fetcher.plain.pid != dead)
        for index in range(2, 5):
            produce(first, b"a%d" % index, partition=index % 2)
            produce(second, b"b%d" % (index - 1))
        expected_first = ["a0", "a1", "a2", "a3", "a4"]
        wait_until(lambda: sorted(live.values) == expected_first and historical.values == ["b0", "b1", "b2", "b3"])
        assert hub.stats()["topics_deleted"] == 0
        assert hub.fetcher.consumers.alive


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


JSON_ITEMS = {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}}
SMALL = b'[{"a":1}]'
SLOW = json.dumps([{"a": number} for number in range(30_000)]).encode()  # a few hundred ms to check


def json_models(topic: str, budget_ms: int) -> Models:
    catalog = CatalogSpec("c", "inline", schemas=(InlineSchema("items", 1, "json", json.dumps(JSON_ITEMS)),))
    rule = TopicModels(topic, value=ModelSpec(model="json", catalog="c", subject="items"))
    return Models((catalog,), (rule,), budgets=Budgets(budget_ms, 1024))


def decode_with(loop_thread: LoopThread, hub: Hub, models: Models) -> None:
    async def use() -> None:
        hub.decode_with(models)

    loop_thread.run(use())


def skipped(topic: str, reason: str) -> int:
    return DecodeStats.snapshot()[0].get((topic, reason), 0)


def test_topics_with_models_are_fetched_and_decoded_by_a_process_of_their_own(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    plain_topic, decoded_topic = new_topic(), new_topic()
    with running_hub(loop_thread) as (hub, streams):
        decode_with(loop_thread, hub, json_models(decoded_topic, 60_000))
        plain = streams(plain_topic, start=LIVE)
        assert hub.stats()["kafka_consumers"] == 1  # the decoding one starts with its first topic
        decoded = streams(decoded_topic, start=LIVE)
        produce(plain_topic, b"not json, passed as it is")
        produce(decoded_topic, b'[ {"a": 1} ]')
        wait_until(lambda: plain.values == ["not json, passed as it is"] and decoded.values == ['[{"a":1}]'])
        assert hub.stats()["kafka_consumers"] == 2
        consumers = hub.fetcher.consumers
        assert None not in (consumers.plain.pid, consumers.decoding.pid)
        assert consumers.plain.pid != consumers.decoding.pid


def test_a_record_past_its_budget_ends_only_the_decoding_process_and_is_skipped_as_too_slow(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    plain_topic, decoded_topic = new_topic(), new_topic()
    with running_hub(loop_thread) as (hub, streams):
        decode_with(loop_thread, hub, json_models(decoded_topic, 20))
        plain, decoded = streams(plain_topic, start=LIVE), streams(decoded_topic, start=LIVE)
        produce(decoded_topic, SMALL)
        produce(plain_topic, b"p0")
        wait_until(lambda: decoded.values == [SMALL.decode()] and plain.values == ["p0"])
        plain_pid = hub.fetcher.consumers.plain.pid
        produce(decoded_topic, SLOW)
        produce(decoded_topic, b'[{"a":2}]')
        produce(plain_topic, b"p1")
        wait_until(lambda: decoded.values == [SMALL.decode(), '[{"a":2}]'] and plain.values == ["p0", "p1"])
        assert skipped(decoded_topic, "too-slow") == 1
        assert hub.fetcher.consumers.decoding.restarts == 1
        assert hub.fetcher.consumers.plain.pid == plain_pid  # the topics without models never noticed


def test_a_record_the_decoding_process_dies_on_is_skipped_as_crashed_and_its_stream_goes_on(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    with running_hub(loop_thread) as (hub, streams):
        decode_with(loop_thread, hub, json_models(topic, 60_000))
        stream = streams(topic, start=LIVE)
        produce(topic, SMALL)
        wait_until(lambda: stream.values == [SMALL.decode()])
        watch = hub.fetcher.consumers.decoding.watch
        assert watch is not None
        _, slow_offset = produce(topic, SLOW)
        produce(topic, b'[{"a":2}]')
        # A crash inside a C extension while that record is decoded: the slot names it.
        wait_until(lambda: watch.slot.read()[3] == Slot.RECORD and watch.slot.where()[2] == slow_offset, timeout=20)
        os.kill(hub.fetcher.consumers.decoding.pid or 0, signal.SIGSEGV)
        wait_until(lambda: stream.values == [SMALL.decode(), '[{"a":2}]'], timeout=20)
        assert skipped(topic, "crashed") == 1
        assert (topic, 0, slow_offset) in watch.poison
