"""The load generator of the fan-out benchmark: many SSE clients in one asyncio process.

Run by `bench/fanout.py` as a subprocess (never imported by it), so that its CPU is its own and it can be
measured apart from the server's::

    .venv/bin/python bench/loadgen.py --port P

It reads one JSON command per line on stdin and answers each with one JSON line on stdout, in order:

- ``{"cmd": "connect", "path": "/x", "n": 1000, "batch": 200, "timeout": 60}``: open ``n`` streams, ``batch``
  at a time (each batch waits for its response headers before the next starts).
- ``{"cmd": "wait_events", "timeout": 10}``: wait until every open stream has received an event.
- ``{"cmd": "reset"}``: start a measurement window (zero the counters and latencies).
- ``{"cmd": "report"}``: the counters and latency percentiles since the last reset.
- ``{"cmd": "drop"}``: close every stream, keeping each one's last event id.
- ``{"cmd": "reconnect", "timeout": 60}``: reopen every dropped stream at once with its ``Last-Event-ID`` and
  wait until each has received its next event.
- ``{"cmd": "ttfe", "path": "/x", "n": 200, "timeout": 10}``: open ``n`` streams one after the other, each
  closed as soon as its first event arrives: the times from connect to first event.
- ``{"cmd": "churn", "path": "/x", "clients": 2000, "seconds": 600, "life": 20, "pause": 5, "resume": 0.5,
  "timeout": 30}``: ``clients`` clients each connect, stay a random time (uniform, mean ``life`` s), leave, wait
  (mean ``pause`` s) and connect again, until ``seconds`` have passed; then all leave. A share ``resume`` of the
  reconnections send their last event id and continue the sequence check across the gap; the others start afresh.
- ``{"cmd": "quit"}``.

With ``--source-addresses N``, the clients connect from N loopback addresses, ``127.0.0.1``, ``127.0.0.2``, ...
``127.0.0.254``, ``127.0.1.1``... (`source_address`; on Linux the whole of 127/8 is the loopback), client i from
the i-th modulo N, as many users would: the platform and its edge count their per-address limits
(``SSE_MAX_CONNECTIONS_PER_CLIENT``, ``SSE_MAX_STREAMS_PER_CLIENT``) per address. A resumed stream comes back from
the address it left. Without it (0) every client connects from 127.0.0.1.

Clients are raw `asyncio.Protocol`s (HTTP/1.1, one GET each, kept open). The benchmark's messages are JSON
objects starting ``{"t":<send time>,"p":<partition>,"s":<sequence in partition>``; the latency of an event
is the time it is parsed here minus ``t`` (both `time.time()` on this machine). A chunked body is decoded
(`Dechunker`): the servers write whole events per chunk, but an edge in front frames the body again as its own
buffers fill, and a chunk's size line may then fall in the middle of an event, whose ``data:`` line or id the
counting would miss (gaps in the resume check, a garbled Last-Event-ID).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import resource
import sys
import time
from array import array
from collections import Counter
from typing import Any

EVENT = re.compile(rb'data: ?\{"t":([0-9.]+)')
EVENT_SEQ = re.compile(rb'data: ?\{"t":([0-9.]+),"p":([0-9]+),"s":([0-9]+)')
MAX_HEAD = 65536
MAX_SAMPLES = 2_000_000


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values.sort()
    return values[min(len(values) - 1, int(q * len(values)))]


ADDRESSES_PER_BLOCK = 254  # 127.0.x.1 .. 127.0.x.254
MAX_SOURCE_ADDRESSES = 256 * ADDRESSES_PER_BLOCK


def source_address(index: int) -> str:
    """The `index`-th loopback source address (from 0): 127.0.0.1 ... 127.0.0.254, 127.0.1.1 ..."""
    if not 0 <= index < MAX_SOURCE_ADDRESSES:
        raise ValueError(f"source address {index} out of 127.0.0.0/16")
    block, host = divmod(index, ADDRESSES_PER_BLOCK)
    return f"127.0.{block}.{host + 1}"


def error_name(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, OSError) and exc.errno is not None:
        return type(exc).__name__ + f"[{exc.errno}]"
    return type(exc).__name__


class Stats:
    def __init__(self) -> None:
        self.reset()
        self.errors: Counter[str] = Counter()  # never reset: every failure of the run is reported

    def reset(self) -> None:
        self.events = 0
        self.bytes = 0
        self.lost = 0  # streams the server closed while they were meant to stay open
        self.latencies = array("d")
        self.stride = 1  # keep one latency in `stride`: halved samples, doubled stride when full
        self.seen = 0
        self.gaps = 0
        self.duplicates = 0
        self.started = time.time()


class Dechunker:
    """The body of a chunked HTTP/1.1 response, from the bytes as they arrive."""

    __slots__ = ("crlf", "left", "raw")

    def __init__(self) -> None:
        self.raw = b""  # an incomplete size line, or a chunk's end still to come
        self.left = 0  # bytes of the current chunk still to come
        self.crlf = False  # the CRLF after a chunk's data is due

    def feed(self, data: bytes) -> bytes:
        buf = self.raw + data if self.raw else data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while pos < end:
            if self.left:
                take = min(self.left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                self.crlf = not self.left
            elif self.crlf:
                if end - pos < 2:
                    break
                pos += 2
                self.crlf = False
            else:
                line = buf.find(b"\r\n", pos)
                if line < 0:
                    break
                self.left = int(buf[pos:line].split(b";", 1)[0], 16)
                pos = line + 2
                if not self.left:  # the last chunk: nothing follows but trailers
                    pos = end
        self.raw = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


class Client(asyncio.Protocol):
    """One SSE stream."""

    def __init__(self, gen: Generator, path: str, request: bytes, source: str | None = None) -> None:
        self.gen = gen
        self.path = path
        self.source = source  # the local address it connects from; None: the kernel's choice (127.0.0.1)
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.status = 0
        self.carry = b""
        self.body: Dechunker | None = None  # a chunked response's decoder
        self.events = 0
        self.last_id: bytes | None = None
        self.last_seq: dict[bytes, int] = {}
        self.closing = False
        loop = asyncio.get_running_loop()
        self.headers: asyncio.Future[int] = loop.create_future()
        self.first_event: asyncio.Future[float] = loop.create_future()  # its time.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def read_head(self, data: bytes) -> bytes | None:
        """The response's head, as it arrives: what follows it once it is complete and a 200, else None."""
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self.fail("bad-response")
            return None
        try:
            self.status = int(self.head[9:12])
        except ValueError:
            self.fail("bad-response")
            return None
        head, data, self.head = self.head[:end], self.head[end + 4 :], b""
        if b"transfer-encoding: chunked" in head.lower():
            self.body = Dechunker()
        if self.status != 200:
            self.fail(f"http-{self.status}")
            return None
        if not self.headers.done():
            self.headers.set_result(self.status)
        return data

    def data_received(self, data: bytes) -> None:
        if not self.status:
            body = self.read_head(data)
            if body is None:
                return
            data = body
        gen = self.gen
        gen.stats.bytes += len(data)
        if self.body is not None:
            try:
                data = self.body.feed(data)
            except ValueError:
                self.fail("bad-chunk")
                return
        buf = self.carry + data if self.carry else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            self.carry = buf
            return
        segment, self.carry = buf[: end + 2], buf[end + 2 :]
        now = time.time()
        if gen.track:
            found = EVENT_SEQ.findall(segment)
            if not found:
                return
            stamps = [t for t, _, _ in found]
            self.check_sequence(found)
        else:
            stamps = EVENT.findall(segment)
            if not stamps:
                return
        count = len(stamps)
        if not self.events:
            self.first_event.set_result(now)
        self.events += count
        stats = gen.stats
        stats.events += count
        if stats.stride > 1:
            stamps = stamps[(-stats.seen) % stats.stride :: stats.stride]
        stats.seen += count
        stats.latencies.extend([now - float(t) for t in stamps])
        if len(stats.latencies) >= MAX_SAMPLES:
            stats.latencies = stats.latencies[::2]
            stats.stride *= 2
        if gen.track:
            at = segment.rfind(b"\nid:") + 1  # 0 when not found: then the segment may start with it
            if segment.startswith(b"id:", at):
                self.last_id = segment[at + 3 : segment.index(b"\n", at)].strip()

    def check_sequence(self, found: list[tuple[bytes, bytes, bytes]]) -> None:
        last = self.last_seq
        stats = self.gen.stats
        for _, partition, text in found:
            seq = int(text)
            before = last.get(partition)
            if before is not None and seq != before + 1:
                if seq <= before:
                    stats.duplicates += 1
                else:
                    stats.gaps += 1
            last[partition] = seq if before is None else max(seq, before)

    def settle(self, reason: str) -> None:
        """Fail the pending futures (marked retrieved: nobody may be waiting for them)."""
        for future in (self.headers, self.first_event):
            if not future.done():
                future.set_exception(ConnectionError(reason))
                future.exception()

    def fail(self, reason: str) -> None:
        self.gen.stats.errors[reason] += 1
        self.closing = True
        self.settle(reason)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.clients.discard(self)
        if self.closing:
            self.settle("closed")
            return
        self.closing = True
        if self.status == 200:
            self.gen.stats.lost += 1
        reason = "closed-by-server" if self.status == 200 else "closed-before-headers"
        self.gen.stats.errors[reason] += 1
        self.settle(reason)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


class Generator:
    def __init__(self, host: str, port: int, source_addresses: int = 0) -> None:
        self.host, self.port = host, port
        self.clients: set[Client] = set()
        # path, last id, last sequences, source address
        self.dropped: list[tuple[str, bytes | None, dict[bytes, int], str | None]] = []
        self.sources = [source_address(i) for i in range(source_addresses)]
        self.opened = 0  # clients opened so far: the next one's source address
        self.stats = Stats()
        self.track = False  # parse partition and sequence, keep the last event id (resume scenarios)

    def request(self, path: str, last_id: bytes | None = None) -> bytes:
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Accept: text/event-stream",
            "Cache-Control: no-cache",
        ]
        head = ("\r\n".join(lines) + "\r\n").encode()
        if last_id is not None:
            head += b"Last-Event-ID: " + last_id + b"\r\n"
        return head + b"\r\n"

    def next_source(self) -> str | None:
        if not self.sources:
            return None
        source = self.sources[self.opened % len(self.sources)]
        self.opened += 1
        return source

    async def open(
        self,
        path: str,
        limit_s: float,
        last_id: bytes | None = None,
        last_seq: dict[bytes, int] | None = None,
        source: str | None = None,
    ) -> Client:
        loop = asyncio.get_running_loop()
        if source is None:
            source = self.next_source()
        client = Client(self, path, self.request(path, last_id), source)
        client.last_seq = dict(last_seq or {})  # a resumed stream continues the sequence check of the old one
        local = (source, 0) if source is not None else None
        try:
            async with asyncio.timeout(limit_s):
                await loop.create_connection(lambda: client, self.host, self.port, local_addr=local)
                await client.headers
        except BaseException as exc:
            if not client.closing:
                self.stats.errors[error_name(exc)] += 1
                client.close()
            raise
        self.clients.add(client)
        return client

    async def connect(self, path: str, n: int, batch: int, limit_s: float) -> dict[str, Any]:
        started = time.monotonic()
        ok = failed = 0
        for first in range(0, n, batch):
            results = await asyncio.gather(
                *(self.open(path, limit_s) for _ in range(min(batch, n - first))), return_exceptions=True
            )
            for result in results:
                if isinstance(result, Client):
                    ok += 1
                else:
                    failed += 1
        return {"ok": ok, "failed": failed, "seconds": time.monotonic() - started}

    async def wait_events(self, limit_s: float) -> dict[str, Any]:
        started = time.monotonic()
        deadline = started + limit_s
        while time.monotonic() < deadline:
            waiting = sum(1 for c in self.clients if c.events == 0)
            if not waiting:
                break
            await asyncio.sleep(0.05)
        waiting = sum(1 for c in self.clients if c.events == 0)
        return {"ready": len(self.clients) - waiting, "waiting": waiting, "seconds": time.monotonic() - started}

    def report(self) -> dict[str, Any]:
        stats = self.stats
        latencies = sorted(stats.latencies)
        return {
            "seconds": time.time() - stats.started,
            "events": stats.events,
            "bytes": stats.bytes,
            "lost": stats.lost,
            "open": len(self.clients),
            "samples": len(latencies),
            "p50": percentile(latencies, 0.50),
            "p99": percentile(latencies, 0.99),
            "max": latencies[-1] if latencies else None,
            "gaps": stats.gaps,
            "duplicates": stats.duplicates,
            "errors": dict(stats.errors),
        }

    def drop(self) -> dict[str, Any]:
        clients = list(self.clients)
        self.dropped = [(c.path, c.last_id, c.last_seq, c.source) for c in clients]
        for client in clients:
            client.close()
        self.clients.clear()
        return {
            "dropped": len(clients),
            "with_id": sum(1 for _, i, _, _ in self.dropped if i is not None),
            "sources": len({s for _, _, _, s in self.dropped}),
        }

    async def reconnect(self, limit_s: float) -> dict[str, Any]:
        """Reopen every dropped stream at once; time until each has received its next event."""
        started = time.time()

        headers: list[float] = []

        async def resume(path: str, last_id: bytes | None, last_seq: dict[bytes, int], source: str | None) -> float:
            client = await self.open(path, limit_s, last_id, last_seq, source)  # failures are counted by open
            headers.append(time.time() - started)
            try:
                async with asyncio.timeout(max(0.1, started + limit_s - time.time())):
                    return await client.first_event - started
            except TimeoutError:
                self.stats.errors["no-event-after-resume"] += 1
                raise

        results = await asyncio.gather(*(resume(*dropped) for dropped in self.dropped), return_exceptions=True)
        times = [r for r in results if isinstance(r, float)]
        return {
            "asked": len(self.dropped),
            "resumed": len(times),
            "failed": len(results) - len(times),
            "all_seconds": max(times) if len(times) == len(results) and times else None,
            "last_seconds": max(times) if times else None,
            "p50": percentile(times, 0.50),
            "p99": percentile(times, 0.99),
            "headers_p50": percentile(headers, 0.50),
            "headers_p99": percentile(headers, 0.99),
        }

    async def ttfe(self, path: str, n: int, limit_s: float) -> dict[str, Any]:
        """Sequential new clients: connect -> first event, each closed once it has its first event."""
        times: list[float] = []
        headers: list[float] = []
        failed = 0
        for _ in range(n):
            started = time.time()
            try:
                client = await self.open(path, limit_s)
            except Exception:  # counted by open
                failed += 1
                continue
            headers.append(time.time() - started)
            try:
                async with asyncio.timeout(limit_s):
                    times.append(await client.first_event - started)
            except Exception as exc:
                self.stats.errors["ttfe-" + error_name(exc)] += 1
                failed += 1
            finally:
                client.close()
        return {
            "n": n,
            "ok": len(times),
            "failed": failed,
            "p50": percentile(times, 0.50),
            "p99": percentile(times, 0.99),
            "max": max(times) if times else None,
            "headers_p50": percentile(headers, 0.50),
            "headers_p99": percentile(headers, 0.99),
        }

    async def churn(
        self, path: str, *, clients: int, seconds: float, life_s: float, pause_s: float, resume: float, limit_s: float
    ) -> dict[str, Any]:
        """Clients connecting and leaving at random for `seconds`; see the module's docstring."""
        self.track = True
        deadline = time.monotonic() + seconds
        counts: Counter[str] = Counter()

        async def slot() -> None:
            last_id: bytes | None = None
            last_seq: dict[bytes, int] = {}
            await asyncio.sleep(random.uniform(0, min(seconds, 2 * pause_s)))  # arrivals spread, not one burst
            while time.monotonic() < deadline:
                resuming = last_id is not None and random.random() < resume
                try:
                    client = await self.open(
                        path, limit_s, last_id if resuming else None, last_seq if resuming else None
                    )
                except Exception:  # counted by open
                    counts["failed"] += 1
                    await asyncio.sleep(random.uniform(0, 2 * pause_s))
                    continue
                counts["resumed" if resuming else "fresh"] += 1
                await asyncio.sleep(min(random.uniform(0, 2 * life_s), max(0.0, deadline - time.monotonic())))
                if client.last_id is not None:
                    last_id, last_seq = client.last_id, client.last_seq
                client.close()
                self.clients.discard(client)
                await asyncio.sleep(random.uniform(0, 2 * pause_s))

        started = time.monotonic()
        await asyncio.gather(*(slot() for _ in range(clients)))
        self.close_all()
        return {"seconds": time.monotonic() - started, **counts}

    def close_all(self) -> None:
        for client in list(self.clients):
            client.close()
        self.clients.clear()


async def serve(gen: Generator) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def answer(reply: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()

    while True:
        line = await reader.readline()
        if not line:
            break
        command = json.loads(line)
        name = command.get("cmd")
        try:
            if name == "connect":
                gen.track = bool(command.get("track", False))
                reply = await gen.connect(
                    command["path"], int(command["n"]), int(command.get("batch", 200)), command.get("timeout", 60)
                )
            elif name == "wait_events":
                reply = await gen.wait_events(command.get("timeout", 10))
            elif name == "reset":
                gen.stats.reset()
                reply = {"ok": True}
            elif name == "report":
                reply = gen.report()
            elif name == "drop":
                reply = gen.drop()
            elif name == "reconnect":
                reply = await gen.reconnect(command.get("timeout", 60))
            elif name == "ttfe":
                reply = await gen.ttfe(command["path"], int(command["n"]), command.get("timeout", 10))
            elif name == "churn":
                reply = await gen.churn(
                    command["path"],
                    clients=int(command["clients"]),
                    seconds=float(command["seconds"]),
                    life_s=float(command["life"]),
                    pause_s=float(command["pause"]),
                    resume=float(command.get("resume", 0.5)),
                    limit_s=float(command.get("timeout", 30)),
                )
            elif name == "quit":
                gen.close_all()
                answer({"ok": True})
                return
            else:
                reply = {"error": f"unknown command {name!r}"}
        except Exception as exc:  # the orchestrator decides what a failure means
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        reply["errors"] = dict(gen.stats.errors)
        answer(reply)
    gen.close_all()


def raise_nofile(limit: int = 65536) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, limit), max(hard, limit)))
        return
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--source-addresses",
        type=int,
        default=0,
        help=f"connect from this many loopback addresses, 127.0.0.1 onwards (at most {MAX_SOURCE_ADDRESSES}; "
        "0: all from 127.0.0.1)",
    )
    args = parser.parse_args()
    if args.host not in {"127.0.0.1", "localhost"}:
        parser.error("the load generator only talks to 127.0.0.1")
    if not 0 <= args.source_addresses <= MAX_SOURCE_ADDRESSES:
        parser.error(f"--source-addresses: 0 to {MAX_SOURCE_ADDRESSES}")
    raise_nofile()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(Generator(args.host, args.port, args.source_addresses)))


if __name__ == "__main__":
    main()
