"""A consumer process's decoder process, from its owner's side (the fetch process, the historical readers' host):
what a record does while it is decoded ends at most that process, never its owner (decision 0012).

One job at a time: `submit(entries)`, then `collect(wait)` gives one result per entry once all are in (None until
then; the results are those of streams/kafka/decoder_process.py). The process itself, its socket and the slot it
says what it is on in are the decoder's `Child`. `collect` is also the watch, so the owner calls it often (every
turn of its loop):

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
    """The owner's side of its decoder: one job at a time, its results as they come in, and what a death of the
    decoder process (`Child`) costs: the record it was on, or a backoff before the next start."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.models = Models()
        self.tally = Tally()  # what this owner's decoders decoded and skipped since the owner last took it
        self.child = Child(clock)
        self._job = 0
        self._entries: list[Entry] | None = None
        self._results: list[object] = []
        self._sent: list[int] = []  # the entries (by index) the decoder has in its job
        self._start_at = 0.0
        self.deaths = 0  # in a row, with no record begun
        self.poison: dict[tuple[str, int, int], None] = {}  # (topic, partition, offset) of records that ended one

    @property
    def busy(self) -> bool:
        return self._entries is not None

    def use(self, models: Models) -> None:
        """Decode with `models` from now on (a decoder started later is given them first)."""
        self.models = models
        self.child.send(("models", models))

    def skip(self, records: list[tuple[str, int, int]]) -> None:
        """Never decode these (topic, partition, offset): a process died on each."""
        self.poison.update(dict.fromkeys(records))

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
            if self.child.conn is None:  # waiting to start another decoder
                if self._clock() >= self._start_at:
                    self._send_job()
                    continue
            elif self._answered(max(0.0, min(deadline - self._clock(), WATCH_S))):
                continue
            elif self.child.gone(self._job, self.models.budgets.record_ms):
                self._lost()
                continue
            if self._clock() >= deadline:
                return None
            if self.child.conn is None:
                time.sleep(min(WATCH_S, max(0.0, self._start_at - self._clock())))

    def close(self) -> None:
        self.child.close()

    def _answered(self, wait: float) -> bool:
        """Whether the decoder's answer came (or the decoder went away) within `wait` s."""
        conn, readable = self.child.conn, self.child.readable
        if conn is None or readable is None:
            return False
        try:
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

    def _lost(self) -> None:
        """The decoder died, or is killed for running past the budget: skip the record it was on, if it was on one,
        and send the rest of the job to another."""
        killed, self.child.killed = self.child.killed, False
        code = self.child.stop()
        _, job, index, state = self.child.slot.read()
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
        if self.child.conn is None:
            self.child.start(self.models)
        self._job += 1
        self.child.watch = None
        self.child.send(("decode", self._job, [self._entries[position] for position in self._sent]))

    def _finish(self) -> list[Result]:
        results = [cast(Result, result) for result in self._results]  # every one is set by now
        self._entries, self._results = None, []
        return results


class Child:
    """One decoder process at a time, from its owner's side: started with the models it decodes with, sent jobs,
    watched through the slot it says what it is on in (read while it works and after it died), and killed, never
    asked to stop. `started` counts the processes started."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._slot_fd = os.memfd_create("decoder-slot")
        os.ftruncate(self._slot_fd, Slot.SIZE)
        self.slot = Slot(self._slot_fd)  # what the decoder is on: read while it works and after it died
        self.process: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.readable: select.poll | None = None  # the decoder's answer, or its end, on `conn`
        self.watch: tuple[int, float] | None = None  # (record begun, when first seen)
        self.killed = False  # for running past its budget: told once to whoever handles the loss
        self.started = 0  # decoder processes started

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, models: Models) -> None:
        self.slot.memory[:] = bytes(Slot.SIZE)
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "streams.kafka.decoder_process", str(theirs.fileno()),
                    str(self._slot_fd), str(models.budgets.memory_mb),
                ],
                cwd=ROOT, pass_fds=(theirs.fileno(), self._slot_fd), stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.conn = Connection(ours.detach())
        self.readable = select.poll()  # made once: `Connection.poll` builds a selector each call
        self.readable.register(self.conn.fileno(), select.POLLIN)
        self.started += 1
        self.send(("models", models))

    def send(self, message: tuple[object, ...]) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):  # the decoder died: the watch notices
                self.conn.send(message)

    def gone(self, job: int, record_ms: int) -> bool:
        """Whether the process ended, or is to be killed: its record of `job` has run past `record_ms`."""
        return self.process is not None and (self.process.poll() is not None or self._overdue(job, record_ms))

    def _overdue(self, job: int, record_ms: int) -> bool:
        sequence, seen, _, state = self.slot.read()
        if state != Slot.RECORD or seen != job:
            self.watch = None
            return False
        now = self._clock()
        if self.watch is None or self.watch[0] != sequence:
            self.watch = (sequence, now)
            return False
        if now - self.watch[1] <= record_ms / 1000:
            return False
        self.killed = True
        return True

    def stop(self) -> int | None:
        """Kill the process, if any; its exit code."""
        process, conn = self.process, self.conn
        self.process = self.conn = None
        self.readable = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return process.wait()

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.slot.memory.close()
            os.close(self._slot_fd)


def _how(code: int | None) -> str:
    if code is None:
        return "unknown"
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
