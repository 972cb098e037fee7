"""Probe how much of an oversized request body a running server reads before it refuses it.

Against a started server (``make run``, or ``python -m streams.server ...``)::

    .venv/bin/python bench/probe_body.py --url http://127.0.0.1:8000

sends, each on a connection of its own: a 16 MiB chunked body with ``GET`` on a stream path, a 16 MiB chunked body
with ``POST`` on an API path, and a ``POST`` on an API path declaring a 64 MiB ``Content-Length`` (and then sending
it). It prints one row each: the status the server answered (``-`` if none), how many body bytes the client got to
send before the server answered or closed, and how long that took. The client's send buffer is kept small
(``SO_SNDBUF`` 64 KiB), so what it "got to send" is close to what the server took in; the kernel's buffers on
both sides still hold a few hundred KiB that the server never read.
"""

from __future__ import annotations

import argparse
import select
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

MIB = 1024 * 1024
PIECE = 64 * 1024
GIVE_UP_S = 60.0


@dataclass
class Outcome:
    status: str
    sent: int
    seconds: float
    closed: bool


def probe(host: str, port: int, head: bytes, body_size: int, *, chunked: bool) -> Outcome:
    """Send `head`, then `body_size` body bytes (chunked or not) until the server answers or closes; `sent` counts
    the body's bytes on the wire (chunk framing included)."""
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIECE)
    sock.sendall(head)
    sock.setblocking(False)
    started = time.monotonic()
    piece = (b"%x\r\n" % PIECE) + b"x" * PIECE + b"\r\n" if chunked else b"x" * PIECE
    wire_size = body_size // PIECE * len(piece) + (5 if chunked else 0)
    pending, sent, answer, closed = b"", 0, b"", False
    while time.monotonic() - started < GIVE_UP_S and sent < wire_size:
        if not pending:
            pending = piece if wire_size - sent > 5 or not chunked else b"0\r\n\r\n"
        readable, writable, _ = select.select([sock], [sock], [], 1.0)
        if readable:
            answer, closed = _read(sock, answer)
            if answer or closed:
                break
        if writable:
            try:
                taken = sock.send(pending)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # reset or broken pipe: the server closed
                closed = True
                break
            sent += taken
            pending = pending[taken:]
    while not (answer or closed) and time.monotonic() - started < GIVE_UP_S:
        if select.select([sock], [], [], 1.0)[0]:
            answer, closed = _read(sock, answer)
    elapsed = time.monotonic() - started
    closing_by = time.monotonic() + 5  # answered: does the server close the connection too?
    while answer and not closed and time.monotonic() < closing_by:
        if select.select([sock], [], [], 0.5)[0]:
            answer, closed = _read(sock, answer)
    sock.close()
    status = answer.split(b"\r\n", 1)[0].split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "-"
    return Outcome(status, sent, elapsed, closed)


def _read(sock: socket.socket, answer: bytes) -> tuple[bytes, bool]:
    try:
        data = sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return answer, False
    except OSError:
        return answer, True
    return answer + data, not data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL (http only)")
    parser.add_argument("--stream-path", default="/items", help="a path outside the reserved prefixes")
    parser.add_argument("--api-path", default="/api/v1/routes/", help="a path of the API")
    args = parser.parse_args()
    where = urlsplit(args.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    authority = f"{host}:{port}".encode()
    stream, api = args.stream_path.encode(), args.api_path.encode()
    cases = [
        ("GET stream, chunked 16 MiB", b"GET " + stream, 16 * MIB, True),
        ("POST API, chunked 16 MiB", b"POST " + api, 16 * MIB, True),
        ("POST API, declared 64 MiB", b"POST " + api, 64 * MIB, False),
    ]
    print(f"{'request':<28} {'status':>6} {'body bytes sent':>16} {'seconds':>8}  closed")
    for name, start, size, chunked in cases:
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % size
        head = start + b" HTTP/1.1\r\nHost: " + authority + b"\r\nContent-Type: application/json\r\n"
        head += framing + b"\r\n\r\n"
        outcome = probe(host, port, head, size, chunked=chunked)
        print(f"{name:<28} {outcome.status:>6} {outcome.sent:>16,} {outcome.seconds:>8.2f}  {outcome.closed}")


if __name__ == "__main__":
    main()
