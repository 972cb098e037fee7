"""A consumer process's decoder process, from its owner's side (the fetch process, the historical readers' host):
what a record does while it is decoded ends at most that process, never its owner (decision 0012).

One job at a time: `submit(entries)`, then `collect(wait)` gives one result per entry once all are in (None until
then; the results are those of streams/kafka/decoder_process.py). `collect` is also the watch, so the owner calls
it often (every turn of its loop):

- **the decoder died** while it decoded a record (a crash in a C extension, the kernel's OOM killer): that record,
  read from the shared slot, is skipped as `crashed`, logged with its topic, partition and offset and counted,
  and never tried again by this owner; the rest of the job goes to a new decoder process.
- **one record's own work ran past its budget** (`Budgets.record_ms`; schema work has timeouts of its own): the
  decoder is killed, the record skipped as `too-slow`, the rest goes to a new decoder process.

A decoder that dies with no record begun (at its start, say) is started again after a backoff; after
`DEATHS_IN_A_ROW` of those the job's records wait, as for an unreachable registry, and are tried again later.
Not thread-safe: the host's readers share one under a lock (`decode`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

from streams.codecs.schemas import Reason
from streams.kafka.decoder_process import Result, Slot
from streams.kafka.decoding import Models, Tally
from streams.kafka.records import RecordTuple

log = logging.getLogger("streams.kafka.decoder")

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m streams...` imports its code, not an installed one
WATCH_S = 0.05  # how often a blocking `decode` looks at the decoder
RESPAWN_BACKOFF_S = (0.0, 0.2, 1.0)  # before the n-th start in a row of a decoder that died with no record begun
DEATHS_IN_A_ROW = 3  # then the job's records wait
POISON_KEPT = 1024  # records this owner skips without trying, the last ones that ended a decoder
_UNSET = object()

Entry = tuple[str, RecordTuple]  # (topic, record)


class Decoder:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.models = Models()
        self.tally = Tally()  # what this owner's decoders decoded and skipped since the owner last took it
        self._slot_fd = os.memfd_create("decoder-slot")
        os.ftruncate(self._slot_fd, Slot.LAYOUT.size)
        self.slot = Slot(self._slot_fd)  # what the decoder is on: read while it works and after it died
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._readable: select.poll | None = None  # the decoder's answer or its end, on `_conn`
        self._job = 0
        self._entries: list[Entry] | None = None
        self._results: list[object] = []
        self._sent: list[int] = []  # the entries (by index) the decoder has in its job
        self._watch: tuple[int, float] | None = None  # (record begun, when first seen)
        self._killed = False
        self._start_at = 0.0
        self.deaths = 0  # in a row, with no record begun
        self.started = 0  # decoder processes started
        self.poison: dict[tuple[str, int, int], None] = {}  # (topic, partition, offset) of records that ended one

    @property
    def busy(self) -> bool:
        return self._entries is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def use(self, models: Models) -> None:
        """Decode with `models` from now on (a decoder started later is given them first)."""
        self.models = models
        if self._conn is not None:
            self._send(("models", models))

    def submit(self, entries: list[Entry]) -> None:
        if self._entries is not None:
            raise RuntimeError("a job is in flight")
        self._entries = entries
        self._results = [_UNSET] * len(entries)
        for index, (topic, record) in enumerate(entries):
            if (topic, record[0], record[1]) in self.poison:
                self._results[index] = None
                self.tally.skipped[(topic, str(Reason.CRASHED))] += 1
        self._send_job()

    def decode(self, entries: list[Entry]) -> list[Result]:
        """`submit` and wait for the results (the host's readers, on their own threads)."""
        self.submit(entries)
        while (results := self.collect(WATCH_S)) is None:
            pass
        return results

    def collect(self, wait: float = 0.0) -> list[Result] | None:
        """The job's results once all are in, else None after up to `wait` s; watches the decoder meanwhile."""
        if self._entries is None:
            return None
        deadline = self._clock() + wait
        while True:
            if not self._sent:  # every entry has its result (or the job was given up)
                return self._finish()
            if self._conn is None:  # waiting to start another decoder
                if self._clock() >= self._start_at:
                    self._send_job()
                    continue
            elif self._answered(max(0.0, min(deadline - self._clock(), WATCH_S))):
                continue
            elif self._process is not None and (self._process.poll() is not None or self._overdue()):
                self._lost()
                continue
            if self._clock() >= deadline:
                return None
            if self._conn is None:
                time.sleep(min(WATCH_S, max(0.0, self._start_at - self._clock())))

    def close(self) -> None:
        self._stop_process()
        with contextlib.suppress(OSError):
            self.slot.memory.close()
            os.close(self._slot_fd)

    def _answered(self, wait: float) -> bool:
        """Whether the decoder's answer came (or the decoder went away) within `wait` s."""
        conn, readable = self._conn, self._readable
        if conn is None or readable is None:
            return False
        try:
            # A poll object made once per decoder: `Connection.poll` builds a selector each call, which costs as
            # much as a small record's decoding.
            if not readable.poll(wait * 1000):
                return False
            _, job, results, skipped, decoded = conn.recv()
        except (EOFError, OSError):
            self._lost()
            return True
        if job == self._job:
            for index, result in zip(self._sent, results, strict=True):
                self._results[index] = result
            self._sent = []
            self.deaths = 0
        self.tally.skipped.update(skipped)
        self.tally.decoded.update(decoded)
        return True

    def _overdue(self) -> bool:
        sequence, job, _, state = self.slot.read()
        if state != Slot.RECORD or job != self._job:
            self._watch = None
            return False
        now = self._clock()
        if self._watch is None or self._watch[0] != sequence:
            self._watch = (sequence, now)
            return False
        if now - self._watch[1] <= self.models.budgets.record_ms / 1000:
            return False
        self._killed = True
        return True

    def _lost(self) -> None:
        """The decoder died, or is killed for running past the budget: skip the record it was on, if it was on one,
        and send the rest of the job to another."""
        killed, self._killed = self._killed, False
        code = self._stop_process()
        _, job, index, state = self.slot.read()
        if state != Slot.IDLE and job == self._job and index < len(self._sent) and self._entries is not None:
            position = self._sent[index]
            topic, record = self._entries[position]
            self._results[position] = None
            reason = Reason.TOO_SLOW if killed else Reason.CRASHED
            self.tally.skipped[(topic, str(reason))] += 1
            self.poison[(topic, record[0], record[1])] = None
            while len(self.poison) > POISON_KEPT:
                del self.poison[next(iter(self.poison))]
            how = f"ran past {self.models.budgets.record_ms} ms" if killed else f"died ({_how(code)})"
            log.warning(
                "topic %s: the decoder process %s while it decoded partition %d offset %d: the record is skipped "
                "(%s) and not tried again", topic, how, record[0], record[1], reason,
            )  # fmt: skip
            self.deaths = 0
        else:
            self.deaths += 1
            log.error("the decoder process died (%s) with no record begun", _how(code))
        self._sent = [position for position in self._sent if self._results[position] is _UNSET]
        if self.deaths >= DEATHS_IN_A_ROW:
            why = f"the decoder process does not start ({_how(code)})"
            for position in self._sent:
                self._results[position] = why
            self._sent = []
            self.deaths = 0
        self._start_at = self._clock() + RESPAWN_BACKOFF_S[min(self.deaths, len(RESPAWN_BACKOFF_S) - 1)]

    def _send_job(self) -> None:
        if self._entries is None:
            return
        self._sent = [position for position, result in enumerate(self._results) if result is _UNSET]
        if not self._sent:
            return
        if self._conn is None:
            self._start()
        self._job += 1
        self._watch = None
        self._send(("decode", self._job, [self._entries[position] for position in self._sent]))

    def _finish(self) -> list[Result]:
        results = [cast(Result, result) for result in self._results]  # every one is set by now
        self._entries, self._results = None, []
        return results

    def _send(self, message: tuple[object, ...]) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):  # the decoder died: the watch notices
                self._conn.send(message)

    def _start(self) -> None:
        self.slot.memory[:] = bytes(Slot.LAYOUT.size)
        ours, theirs = socket.socketpair()
        with theirs:
            self._process = subprocess.Popen(
                [
                    sys.executable, "-m", "streams.kafka.decoder_process", str(theirs.fileno()),
                    str(self._slot_fd), str(self.models.budgets.memory_mb),
                ],
                cwd=ROOT, pass_fds=(theirs.fileno(), self._slot_fd), stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._conn = Connection(ours.detach())
        self._readable = select.poll()
        self._readable.register(self._conn.fileno(), select.POLLIN)
        self.started += 1
        self._send(("models", self.models))

    def _stop_process(self) -> int | None:
        process, conn = self._process, self._conn
        self._process = self._conn = self._readable = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return process.wait()


def _how(code: int | None) -> str:
    if code is None:
        return "unknown"
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
