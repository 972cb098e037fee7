"""The hand-written baseline: the least an asyncio server does to open an SSE stream and to fan Kafka out.

    python bench/baseline_server.py --port 8001 [--history 8] [--catch-up 8]
    python bench/baseline_server.py --port 8001 --kafka 127.0.0.1:9092 --topic T [--keep 100000]

One process, one `asyncio.Protocol` per connection, nothing else: it reads the request head, splits the request
line and the headers by hand, and answers any GET with `200`, the stream's headers and, in the same chunk, its
events: the first `--history` of a fixed sequence for a fresh request, the `--catch-up` after the one named by
`Last-Event-ID` for a resumed one. No routing, no guard, no Kafka, no metrics: what is left of a stream's open is
accepting the connection, parsing the request and writing the first bytes, the parts the platform cannot skip
either. Events are what bench/producer.py sends (`{"t":…,"p":…,"s":…,"pad":…}`, 1 KiB), with the integer
sequence as id, so bench/loadgen.py reads both servers alike. bench/open_cost.py runs this mode.

With `--kafka`, the live mode that bench/fanout.py runs with `--baseline`: a thread consumes every partition of
the topic from its end (confluent-kafka, no group) and hands each batch to the event loop, which writes what
arrived within `--coalesce-ms` (20, the platform's default) as one chunk to every open stream, with the arrival
number as id; the last `--keep` events stay in memory, so a stream
resuming with `Last-Event-ID` gets the ones after it. `/-/health` answers with the number of streams. No routing,
guard, replay from Kafka, flow control, metrics or delivery log: the cost of fan-out itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import os
import threading
import time

PARTITIONS = 4
MESSAGE_BYTES = 1024
MAX_HEAD = 16384
HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\n"
    b"x-accel-buffering: no\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
REFUSED = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


@functools.lru_cache(maxsize=65536)
def event(number: int) -> bytes:
    """Event `number` (from 1) on the wire: its id and a 1 KiB JSON body, as the producer pads them."""
    body = {"t": time.time(), "p": number % PARTITIONS, "s": number // PARTITIONS, "pad": ""}
    text = json.dumps(body, separators=(",", ":"))
    body["pad"] = "x" * max(0, MESSAGE_BYTES - len(text))
    return b"id:%d\ndata:%s\n\n" % (number, json.dumps(body, separators=(",", ":")).encode())


def parse_head(head: bytes) -> tuple[bytes, dict[bytes, bytes]] | None:
    """A GET's path and headers split by hand; None while the head is incomplete, ValueError when it is no GET."""
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = head[:end].split(b"\r\n")
    method, _, rest = lines[0].partition(b" ")
    path, _, version = rest.partition(b" ")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if method != b"GET" or not path.startswith(b"/") or not version.startswith(b"HTTP/1."):
        raise ValueError("not a GET")
    return path, headers


class Request(asyncio.Protocol):
    """One connection: reads the request head, refuses what is no GET (or too long a head), and hands the path
    and headers of a GET to `answer` once."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.answered = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.answered:
            return
        self.head += data
        try:
            parsed = parse_head(self.head)
        except ValueError:
            self.refuse()
            return
        if parsed is None:
            if len(self.head) > MAX_HEAD:
                self.refuse()
            return
        self.answered = True
        self.answer(*parsed)

    def answer(self, path: bytes, headers: dict[bytes, bytes]) -> None:
        raise NotImplementedError

    def refuse(self) -> None:
        assert self.transport is not None
        self.answered = True
        self.transport.write(REFUSED)
        self.transport.close()


class Stream(Request):
    def __init__(self, history: int, catch_up: int) -> None:
        super().__init__()
        self.history = history
        self.catch_up = catch_up

    def answer(self, path: bytes, headers: dict[bytes, bytes]) -> None:
        assert self.transport is not None
        last_id = headers.get(b"last-event-id")
        first = 1
        count = self.history
        if last_id is not None:
            with contextlib.suppress(ValueError):
                first, count = int(last_id) + 1, self.catch_up
        body = b"retry:2000\n\n" + b"".join(event(n) for n in range(first, first + count))
        self.transport.write(HEAD + b"%x\r\n%s\r\n" % (len(body), body))


async def serve(port: int, history: int, catch_up: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Stream(history, catch_up), "127.0.0.1", port, backlog=4096, reuse_address=True
    )
    async with server:
        await server.serve_forever()


# --------------------------------------------------------------------------
# Live mode (--kafka): what bench/fanout.py measures the platform against
# --------------------------------------------------------------------------


class Hub:
    """The live mode's fan-out: what the consumer thread hands over within a coalescing window becomes one
    chunk, written to every stream; the last `keep` events stay in memory so a resumed stream gets what it
    missed."""

    def __init__(self, keep: int, coalesce_s: float) -> None:
        self.events: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=keep)
        self.next_number = 1
        self.flushed = 0  # the last event written to the streams: those after it go with the next flush
        self.streams: set[LiveStream] = set()
        self.delivered = 0
        self.coalesce_s = coalesce_s
        self.pending: list[bytes] = []
        self.flush_at: asyncio.TimerHandle | None = None
        self.last_flush = float("-inf")

    def publish(self, values: list[bytes]) -> None:
        """Number and keep the batch's events; write them at once after a quiet spell, else at the end of the
        coalescing window, with whatever else arrived meanwhile (as the platform's `SSE_COALESCE_MS` does)."""
        for value in values:
            encoded = b"id:%d\ndata:%s\n\n" % (self.next_number, value)
            self.events.append((self.next_number, encoded))
            self.next_number += 1
            self.pending.append(encoded)
        if self.flush_at is not None:
            return
        loop = asyncio.get_running_loop()
        due = self.last_flush + self.coalesce_s
        if loop.time() >= due:
            self.flush()
        else:
            self.flush_at = loop.call_at(due, self.flush)

    def flush(self) -> None:
        self.flush_at = None
        self.last_flush = asyncio.get_running_loop().time()
        body = b"".join(self.pending)
        count, self.pending = len(self.pending), []
        self.flushed = self.next_number - 1
        chunk = b"%x\r\n%s\r\n" % (len(body), body)
        for stream in self.streams:
            stream.write(chunk)
        self.delivered += count * len(self.streams)

    def after(self, number: int) -> bytes:
        """The events after `number` still held and already written to the streams, as one string of events: those
        waiting for the coalescing window go to a resumed stream with the next flush, as to every other (replayed
        here too, they reached it twice: duplicates in the storms at 40 msg/s)."""
        return b"".join(encoded for n, encoded in self.events if number < n <= self.flushed)


class LiveStream(Request):
    """A stream of the live mode: `/-/health` answers with the hub's counts, any other GET subscribes, from the
    live end or, with a `Last-Event-ID` the hub wrote, from the event after it."""

    def __init__(self, hub: Hub) -> None:
        super().__init__()
        self.hub = hub

    def answer(self, path: bytes, headers: dict[bytes, bytes]) -> None:
        assert self.transport is not None
        if path == b"/-/health":
            body = json.dumps({"streams": len(self.hub.streams), "delivered": self.hub.delivered}).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close"
                b"\r\n\r\n%s" % (len(body), body)
            )
            self.transport.close()
            return
        body = b"retry:2000\n\n"
        last_id = headers.get(b"last-event-id")
        if last_id is not None:
            with contextlib.suppress(ValueError):
                body += self.hub.after(int(last_id))
        self.transport.write(HEAD + b"%x\r\n%s\r\n" % (len(body), body))
        self.hub.streams.add(self)

    def write(self, chunk: bytes) -> None:
        assert self.transport is not None
        self.transport.write(chunk)

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.streams.discard(self)


def consume(bootstrap: str, topic: str, loop: asyncio.AbstractEventLoop, hub: Hub, stop: threading.Event) -> None:
    """The consumer thread: every partition of `topic` from its end (no group), each batch handed to the loop."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition  # noqa: PLC0415  (live mode only)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-baseline-{os.getpid()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            "allow.auto.create.topics": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions])
        while not stop.is_set():
            first = consumer.poll(0.1)  # consume() would wait for a full batch; a poll returns at the first record
            if first is None:
                continue
            batch = [first, *consumer.consume(999, 0)]
            values = [v for m in batch if m.error() is None and (v := m.value()) is not None]
            if values:
                loop.call_soon_threadsafe(hub.publish, values)
    finally:
        consumer.close()


async def serve_live(port: int, bootstrap: str, topic: str, keep: int, coalesce_s: float) -> None:
    loop = asyncio.get_running_loop()
    hub = Hub(keep, coalesce_s)
    stop = threading.Event()
    thread = threading.Thread(target=consume, args=(bootstrap, topic, loop, hub, stop), daemon=True)
    thread.start()
    server = await loop.create_server(lambda: LiveStream(hub), "127.0.0.1", port, backlog=4096, reuse_address=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        stop.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--history", type=int, default=8, help="events a fresh stream gets (default 8)")
    parser.add_argument("--catch-up", type=int, default=8, help="events a resumed stream gets (default 8)")
    parser.add_argument("--kafka", metavar="BOOTSTRAP", help="live mode: stream the topic's new records")
    parser.add_argument("--topic", help="live mode: the topic")
    parser.add_argument("--keep", type=int, default=100_000, help="live mode: events kept for resumes")
    parser.add_argument("--coalesce-ms", type=int, default=20, help="live mode: writes coalesced within (20)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        if args.kafka:
            if not args.topic:
                parser.error("--kafka needs --topic")
            asyncio.run(serve_live(args.port, args.kafka, args.topic, args.keep, args.coalesce_ms / 1000))
        else:
            asyncio.run(serve(args.port, args.history, args.catch_up))


if __name__ == "__main__":
    main()
