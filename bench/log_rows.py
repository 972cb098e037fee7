"""What writing the delivery log's session rows costs, and what it costs the event loop beside it.

    .venv/bin/python bench/log_rows.py --rows 18000 --rounds 3

A reconnect storm of 9 000 clients hands the log's writer thread (streams/telemetry/log_writer.py) 18 000 rows of
the sessions table, an opened and a closed row per stream. This writes that many rows as one flush does (messages
of `BATCH_ROWS`), with fastavro and with `RowEncoder` (streams/telemetry/avro_rows.py), alternating, and prints:
- µs of CPU per row, the writer alone;
- the main thread's turn: it makes 20 000 small socket sends (as the event loop writes to its streams), alone and
  then while a thread writes the rows, in ms of wall time; the difference is what the loop loses to the writer
  holding the interpreter's lock.
The rows are made as `session_row` makes them, with the process's columns as `LogTopic` adds them.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from streams.telemetry.avro_rows import RowEncoder
from streams.telemetry.delivery_schema import BATCH_ROWS, SCHEMA_VERSION, SCHEMAS, SESSIONS
from streams.telemetry.log_writer import fastavro_writer

COMMON = {"schema_version": SCHEMA_VERSION, "node": "web-1", "pid": 4242, "process": "web-1-4242-0123456789ab"}
SENDS = 20_000


def session_rows(n: int) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [
        {
            "session": uuid.uuid4().hex,
            "event": "closed" if i % 2 else "opened",
            "at": now + i,
            "opened_at": now,
            "route": "orders-live",
            "endpoint": "/orders/{id}",
            "topic": "orders",
            "path": f"/orders/{i % 1000}",
            "identity": None,
            "client": uuid.uuid4().hex,
            "user_agent": "chrome",
            "start": "resumed",
            "end": "client_gone" if i % 2 else None,
            "events": 12 if i % 2 else 0,
            "bytes": 2345 if i % 2 else 0,
            "replayed": 0,
            "resets": 0,
        }
        for i in range(n)
    ]


def flush(write: Callable[[list[dict[str, Any]]], bytes], rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), BATCH_ROWS):
        write(rows[start : start + BATCH_ROWS])


def sends(sock: socket.socket) -> float:
    """The main thread's turn: wall time of SENDS small sends, each with a little Python work beside it."""
    payload = b"data: x\n\n" * 20
    began = time.perf_counter()
    for _ in range(SENDS):
        sock.send(payload)
        sum(range(30))
    return time.perf_counter() - began


def drain(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(1 << 16):
                return
        except BlockingIOError:
            time.sleep(0.0005)
        except OSError:
            return


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=18_000, help="session rows per flush (default 18 000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each writer once per round (default 3)")
    args = parser.parse_args()

    rows = session_rows(args.rows)
    writers = {
        "fastavro": fastavro_writer(SESSIONS, COMMON),
        "RowEncoder": RowEncoder(SCHEMAS[SESSIONS], COMMON).encode,
    }
    assert writers["fastavro"](rows[:100]) == writers["RowEncoder"](rows[:100])
    sender, receiver = socket.socketpair()
    receiver.setblocking(False)
    threading.Thread(target=drain, args=(receiver,), daemon=True).start()

    per_row: dict[str, list[float]] = {name: [] for name in writers}
    alone: list[float] = []
    beside: dict[str, list[float]] = {name: [] for name in writers}
    for round_ in range(args.rounds):
        order = list(writers) if round_ % 2 == 0 else list(reversed(writers))
        for name in order:
            began = time.thread_time()
            flush(writers[name], rows)
            per_row[name].append((time.thread_time() - began) * 1e6 / len(rows))
        alone.append(sends(sender))
        for name in order:
            thread = threading.Thread(target=flush, args=(writers[name], rows))
            thread.start()
            beside[name].append(sends(sender))
            thread.join()
    sender.close()

    print(f"{len(rows)} session rows per flush, {args.rounds} rounds; main thread: {SENDS} sends")
    print()
    print("| writer | µs CPU per row | main thread's sends beside a flush, ms | ÷ alone |")
    print("|---|---:|---:|---:|")
    base = statistics.median(alone)
    print(f"| (none: the sends alone) | | {', '.join(f'{t * 1000:.0f}' for t in alone)} | 1 |")
    for name in writers:
        rows_cost = ", ".join(f"{us:.1f}" for us in per_row[name])
        times = ", ".join(f"{t * 1000:.0f}" for t in beside[name])
        print(f"| {name} | {rows_cost} | {times} | {statistics.median(beside[name]) / base:.2f} |")


if __name__ == "__main__":
    main()
