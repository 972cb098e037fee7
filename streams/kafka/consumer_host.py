"""The historical readers' consumers, hosted in one child process of the worker (streams/kafka/fetch_process.py,
`host`).

A topic deleted while a reader replays it can make librdkafka crash (decision 0008): that ends the host process,
not the worker. The calls in flight then raise `ConsumerLost`, and the next reader opened starts another host.
Calls block: each historical reader makes them from its own thread, in order.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

from streams.kafka.decoding import DecodeStats, Models
from streams.kafka.host_process import STATS
from streams.kafka.pipe import Receiver

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m streams...` imports its code, not an installed one
CALL_MARGIN_S = 30.0  # a call's answer is waited for this long past its own timeout (a hung host is a defect)


class ConsumerLost(Exception):
    """The host process died (a crash inside librdkafka): the reader's consumer is gone."""


class HostError(Exception):
    """The consumer raised in the host; the message is its text."""


class ConsumerHost:
    _lock = threading.Lock()
    _current: ClassVar[ConsumerHost | None] = None
    models: ClassVar[Models] = Models()  # what the host decodes records with

    @classmethod
    def decode_with(cls, models: Models) -> None:
        """Decode historical reads with `models` from now on (a host started later is given them first)."""
        with cls._lock:
            if models == cls.models:
                return
            cls.models = models
            current = cls._current
        if current is not None and current.alive:
            current.tell_models(models)

    @classmethod
    def get(cls) -> ConsumerHost:
        """The process's host, started on first use and again after one died."""
        with cls._lock:
            if cls._current is None or not cls._current.alive:
                cls._current = ConsumerHost()
            return cls._current

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streams.kafka.fetch_process", str(theirs.fileno()), "host"],
                cwd=ROOT, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.conn = Connection(ours.detach())
        self.alive = True
        self._send = threading.Lock()  # also guards _pending and alive
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count()
        self.tell_models(self.models)
        threading.Thread(target=self._read, name="kafka-history-host", daemon=True).start()

    def tell_models(self, models: Models) -> None:
        with self._send, contextlib.suppress(OSError):  # died: the next host is given them
            self.conn.send((STATS, 0, "models", (models,)))

    def call(self, reader: int, operation: str, *args: Any, timeout: float) -> Any:
        future: Future[Any] = Future()
        with self._send:
            if not self.alive:
                raise ConsumerLost("the historical readers' consumer process died")
            request = next(self._ids)
            self._pending[request] = future
            with contextlib.suppress(OSError):  # died: the reader thread fails the future
                self.conn.send((request, reader, operation, args))
        return future.result(timeout + CALL_MARGIN_S)

    def _read(self) -> None:
        receiver = Receiver(self.conn)
        while True:
            try:
                request, ok, result = receiver.recv()
            except (EOFError, OSError):
                break
            if request == STATS:
                DecodeStats.add(*result)
                continue
            with self._send:
                future = self._pending.pop(request, None)
            if future is not None:
                if ok:
                    future.set_result(result)
                else:
                    future.set_exception(HostError(result))
        code = self.process.wait()
        with self._send:
            self.alive = False
            pending, self._pending = self._pending, {}
        self.conn.close()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        log.error("the historical readers' consumer process died (%s); %d reads in flight fail", how, len(pending))
        for future in pending.values():
            future.set_exception(ConsumerLost(f"the historical readers' consumer process died ({how})"))


class RemoteConsumer:
    """One historical reader's consumer, in the host: assigned at explicit offsets, read, closed."""

    _ids = itertools.count(1)

    def __init__(self, config: dict[str, Any], topic: str, offsets: list[tuple[int, int]], timeout: float) -> None:
        self.host, self.id = ConsumerHost.get(), next(self._ids)
        self.host.call(self.id, "open", config, topic, offsets, timeout=timeout)

    def read(self, timeout: float, batch_size: int) -> tuple[list[tuple[Any, ...]], list[tuple[int, int]]]:
        """Records (as tuples) and the partitions at their end with that end, from one poll."""
        result: tuple[list[tuple[Any, ...]], list[tuple[int, int]]] = self.host.call(
            self.id, "read", timeout, batch_size, timeout=timeout
        )
        return result

    def close(self, timeout: float) -> None:
        with contextlib.suppress(ConsumerLost):  # gone with its process
            self.host.call(self.id, "close", timeout=timeout)
