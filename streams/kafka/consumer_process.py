"""A fetch process of the worker (streams/kafka/fetch_process.py), seen from the worker: started, read, watched and
started again when it dies.

A thread of the worker reads what the child sends: batches go to the loop with `call_soon_threadsafe`, at most
MAX_BATCHES_IN_FLIGHT at a time (the child waits for the loop to take one before it sends another), Kafka's ends go
to `highs`. When the child dies, another is started (after a backoff if it died young) and the fetcher is told.

The decoded topics' fetch process (`decodes`) decodes records in place, and this side watches it (decision 0012):
it gives the child a shared slot where the child says which record it is on, looks at it every `WATCH_S`, and kills
the child when one record's own work has run past the models' budget. After any death of that child, the record
the slot names, if it was on one, is skipped: counted (`too-slow` if it was killed for its time, `crashed`
otherwise), logged with its topic, partition and offset, and given to every later child as poison, which it skips
without trying. Such a death costs no backoff: its cause is known and will not come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.kafka_settings import KafkaSettings
from streams.codecs.schemas import Reason
from streams.kafka.client import Record
from streams.kafka.decoder_process import Slot
from streams.kafka.decoding import DecodeStats, Models
from streams.kafka.pipe import Receiver

if TYPE_CHECKING:
    from streams.kafka.fetcher import Fetcher

log = logging.getLogger("streams.kafka.fetcher")

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m streams...` imports its code, not an installed one
RESTART_BACKOFF_S = (0.0, 0.2, 0.5, 1.0, 2.0, 5.0)  # before the n-th restart in a row of a consumer that died young
YOUNG_S = 10.0  # a consumer process that dies sooner than this after its start died young
GIVE_UP_AFTER = 5  # restarts in a row of a consumer that dies young: then the process reports itself not ready
WATCH_S = 0.1  # how often the decoded topics' fetch process is looked at
POISON_KEPT = 1024  # records no child tries any more, the last ones one died on

Key = tuple[str, int]  # (topic, partition)


class ConsumerProcess:
    def __init__(
        self,
        kafka: KafkaSettings,
        loop: asyncio.AbstractEventLoop,
        fetcher: Fetcher,
        *,
        batch_size: int,
        decodes: bool = False,
    ) -> None:
        self._kafka, self._loop, self._fetcher, self._batch_size = kafka, loop, fetcher, batch_size
        self._lock = threading.Lock()  # guards _conn: the loop sends, the reader thread drops a dead child's
        self._conn: Connection | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.running = False
        self.highs: dict[Key, int] = {}  # Kafka's end of each partition, as the last fetch response said
        self.models = Models()  # what the consumer decodes with
        self.waiting: dict[Key, str] = {}  # partitions waiting for their registry, as the consumer last said
        self.restarts = 0  # consumer processes started again after one died
        self.young_deaths = 0  # in a row
        self._started_at = 0.0
        self.watch = DecodingWatch() if decodes else None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        """The fetch runs (a consumer that keeps dying young does not; readiness reports it)."""
        lived = time.monotonic() - self._started_at >= YOUNG_S
        return self.running and (self.young_deaths < GIVE_UP_AFTER or lived)

    def start(self) -> None:
        self.running = True
        self._spawn()
        if self.watch is not None:
            self._loop.call_later(WATCH_S, self._look)

    def stop(self) -> None:
        self.running = False
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(("stop",))  # the child closes its consumer and exits; the reader sees the socket close
        if (process := self._process) is not None and _waited(process, 10) is None:
            process.kill()
            process.wait()
        if (reader := self._reader) is not None and reader is not threading.current_thread():
            reader.join(10)

    def send(self, message: tuple[Any, ...]) -> None:
        """Send a command to the consumer; dropped while none runs (a new one is given every assignment)."""
        self.send_pickled(pickle.dumps(message))

    def send_pickled(self, message: bytes) -> None:  # as `Connection.recv` unpickles it
        with self._lock:
            if self._conn is None:
                return
            with contextlib.suppress(OSError):  # the child died: the reader thread notices
                self._conn.send_bytes(message)

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        command = [sys.executable, "-m", "streams.kafka.fetch_process", str(theirs.fileno())]
        fds = [theirs.fileno()]
        if self.watch is not None:
            command += ["decode", str(self.watch.fresh())]
            fds.append(self.watch.fd)
        with theirs:
            self._process = subprocess.Popen(command, cwd=ROOT, pass_fds=fds, stdin=subprocess.DEVNULL)
        conn = Connection(ours.detach())
        conn.send(("config", self._kafka.fetcher_config(), self._batch_size))
        conn.send(("models", self.models))
        if self.watch is not None and self.watch.poison:
            conn.send(("poison", list(self.watch.poison)))
        self.waiting = {}
        self._started_at = time.monotonic()
        with self._lock:
            self._conn = conn
        self._reader = threading.Thread(
            target=self._read, args=(conn, self._process), name="kafka-fetcher", daemon=True
        )
        self._reader.start()

    def _read(self, conn: Connection, process: subprocess.Popen[bytes]) -> None:
        deliver, call = self._fetcher.deliver, self._loop.call_soon_threadsafe
        receiver = Receiver(conn)
        while True:
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            try:
                if kind == "batch":
                    _, records, eof, epochs = message
                    records = {key: [Record(*r) for r in found] for key, found in records.items()}
                    call(deliver, self, records, set(eof), epochs)
                elif kind == "highs":
                    self.highs = message[1]
                    call(self._fetcher.on_lows, message[2])
                elif kind == "errors":
                    call(self._fetcher.on_errors, set(message[1]))
                elif kind == "decoding":
                    DecodeStats.add(message[1], message[2])
                    self.waiting = message[3]
            except RuntimeError:  # the loop closed: the process is stopping
                break
        with self._lock:
            if self._conn is conn:
                self._conn = None
            conn.close()  # a child still running (the loop closed) sees its socket close and exits
        code = process.wait()
        if self.running:
            with contextlib.suppress(RuntimeError):  # the loop closed: the process is stopping
                call(self._lost, code)

    def _look(self) -> None:
        """On the loop: kill the decoding child if one record's own work has run past the budget."""
        if not self.running or self.watch is None:
            return
        self._loop.call_later(WATCH_S, self._look)
        if self.watch.overdue(self.models.budgets.record_ms) and self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    def _lost(self, code: int) -> None:
        """On the loop: the consumer process died; start another (after a backoff if young and not on a record)."""
        if not self.running:
            return
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if self.watch is not None and self.watch.died(how, self.models.budgets.record_ms):
            self.young_deaths = 0
        else:
            log.error("the fetcher's consumer process died (%s); starting another", how)
            young = time.monotonic() - self._started_at < YOUNG_S
            self.young_deaths = self.young_deaths + 1 if young else 0
        self._loop.call_later(RESTART_BACKOFF_S[min(self.young_deaths, len(RESTART_BACKOFF_S) - 1)], self._restart)

    def _restart(self) -> None:
        if not self.running:
            return
        self.restarts += 1
        self._spawn()
        self._fetcher.restarted(self)


class DecodingWatch:
    """What the worker knows of its decoded topics' fetch process: the shared slot where the child says which
    record it is on, how long it has been on it, and the records children died on (`poison`)."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("fetch-decoding-slot")
        os.ftruncate(self.fd, Slot.SIZE)
        self.slot = Slot(self.fd)
        self.poison: dict[tuple[str, int, int], None] = {}  # (topic, partition, offset), the last POISON_KEPT
        self._seen: tuple[int, float] | None = None  # (record begun, when first seen)
        self._killed = False

    def fresh(self) -> int:
        """The slot, emptied for a new child; its descriptor."""
        self.slot.memory[:] = bytes(Slot.SIZE)
        self._seen, self._killed = None, False
        return self.fd

    def overdue(self, record_ms: int) -> bool:
        """Whether the child's record has run past `record_ms` of its own work (then it is to be killed)."""
        sequence, _, _, state = self.slot.read()
        if state != Slot.RECORD:
            self._seen = None
            return False
        now = time.monotonic()
        if self._seen is None or self._seen[0] != sequence:
            self._seen = (sequence, now)
            return False
        self._killed = now - self._seen[1] > record_ms / 1000
        return self._killed

    def died(self, how: str, record_ms: int) -> bool:
        """The child died: skip for good the record it was on, if it was on one; whether it was."""
        _, _, _, state = self.slot.read()
        if state == Slot.IDLE:
            return False
        topic, partition, offset = self.slot.where()
        reason = Reason.TOO_SLOW if self._killed else Reason.CRASHED
        self.poison[(topic, partition, offset)] = None
        while len(self.poison) > POISON_KEPT:
            del self.poison[next(iter(self.poison))]
        DecodeStats.add({(topic, str(reason)): 1}, {})
        what = f"ran past {record_ms} ms on" if self._killed else f"died ({how}) while it decoded"
        log.warning(
            "topic %s: the decoded topics' fetch process %s partition %d offset %d: the record is skipped (%s) and "
            "not tried again; starting another", topic, what, partition, offset, reason,
        )  # fmt: skip
        return True


def _waited(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The process's exit code once it ended within `timeout` s, else None."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
