"""The hand-written baseline for bench/open_cost.py: the least an asyncio server does to open an SSE stream.

    python bench/baseline_server.py --port 8001 [--history 8] [--catch-up 8]

One process, one `asyncio.Protocol` per connection, nothing else: it reads the request head, splits the request
line and the headers by hand, and answers any GET with `200`, the stream's headers and, in the same chunk, its
events: the first `--history` of a fixed sequence for a fresh request, the `--catch-up` after the one named by
`Last-Event-ID` for a resumed one. No routing, no guard, no Kafka, no metrics: what is left of a stream's open is
accepting the connection, parsing the request and writing the first bytes, the parts the platform cannot skip
either. Events are what bench/producer.py sends (`{"t":…,"p":…,"s":…,"pad":…}`, 1 KiB), with the integer
sequence as id, so bench/loadgen.py reads both servers alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
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


class Stream(asyncio.Protocol):
    def __init__(self, history: int, catch_up: int) -> None:
        self.history = history
        self.catch_up = catch_up
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
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self.refuse()
            return
        lines = self.head[:end].split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        path, _, version = rest.partition(b" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if method != b"GET" or not path.startswith(b"/") or not version.startswith(b"HTTP/1."):
            self.refuse()
            return
        self.answered = True
        self.respond(headers.get(b"last-event-id"))

    def respond(self, last_id: bytes | None) -> None:
        assert self.transport is not None
        first = 1
        count = self.history
        if last_id is not None:
            with contextlib.suppress(ValueError):
                first, count = int(last_id) + 1, self.catch_up
        body = b"retry:2000\n\n" + b"".join(event(n) for n in range(first, first + count))
        self.transport.write(HEAD + b"%x\r\n%s\r\n" % (len(body), body))

    def refuse(self) -> None:
        assert self.transport is not None
        self.answered = True
        self.transport.write(REFUSED)
        self.transport.close()


async def serve(port: int, history: int, catch_up: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Stream(history, catch_up), "127.0.0.1", port, backlog=4096, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--history", type=int, default=8, help="events a fresh stream gets (default 8)")
    parser.add_argument("--catch-up", type=int, default=8, help="events a resumed stream gets (default 8)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.history, args.catch_up))


if __name__ == "__main__":
    main()
