"""The decoder process: where a consumer process's records are decoded, so that nothing a record does while it is
decoded reaches anything else (decision 0012).

Started by `Decoder` (streams/kafka/decoder.py) as `python -m streams.kafka.decoder_process FD SLOT MEMORY_MB`: FD
is its end of a socket pair carrying pickled messages both ways, SLOT a shared memory file where it says which
record it decodes (`Slot`), MEMORY_MB the address space it may use. It imports no Django and no Kafka client.

Commands (owner to decoder), tuples:
    ("models", Models)                     decode with these from now on
    ("decode", job, [(topic, record), ...])  decode these, in order
Answers (decoder to owner):
    ("done", job, [result, ...], {(topic, reason): skipped}, {topic: decoded})

A result is the decoded record tuple, None when the record is skipped, a string when its schema's registry cannot
be reached (why: the record waits), or False when it was not tried: a record after one of its partition that waits
(a partition's records go out in order), or any record once the answer holds `ANSWER_BYTES` of JSON already. The
decoder exits when its socket closes.
"""

from __future__ import annotations

import mmap
import os
import resource
import signal
import struct
import sys
from multiprocessing.connection import Connection
from typing import Any

from streams.codecs.schemas import timing
from streams.kafka.decoding import Decoding, Waiting
from streams.kafka.process_logs import log_to_stderr
from streams.kafka.records import RecordTuple

ANSWER_BYTES = 4 * 1024 * 1024  # one answer holds about this much decoded JSON at most (as the fetch's batches)
RECURSION_LIMIT = 4_000  # frames: values nest at most `max_depth` (1000 at most) levels, checked before they are built

Result = RecordTuple | str | bool | None


class Slot:
    """Shared memory where a decoding process says what it does, read by its owner while it works and after it
    died: (sequence, job, index, state), and where the record is (`at`, `where`: a decoded topics' fetch process
    decodes records it fetched itself, in no job). The sequence counts the records begun; `index` is the record's
    place in the job. A reader sees a consistent slot once the process stopped (it is read after the process
    ended), and at worst a stale one while it runs (the watch then waits one more look)."""

    LAYOUT = struct.Struct("<QqIB")
    PLACE = struct.Struct("<iqH")  # partition, offset, the topic's length in bytes (the topic follows)
    SIZE = LAYOUT.size + PLACE.size + 256  # Kafka's topic names have at most 249 characters
    IDLE, RECORD, SCHEMA = 0, 1, 2  # states: between records, a record's own work, schema work

    def __init__(self, fd: int) -> None:
        self.memory = mmap.mmap(fd, self.SIZE)
        self._sequence = 0
        self._job = self._index = 0
        self._topic, self._name_size = "", 0

    def at(self, topic: str, partition: int, offset: int) -> None:
        """The record about to begin is this one."""
        if topic != self._topic:
            name = topic.encode()[:256]
            self.memory[self.LAYOUT.size + self.PLACE.size : self.LAYOUT.size + self.PLACE.size + len(name)] = name
            self._topic, self._name_size = topic, len(name)
        self.PLACE.pack_into(self.memory, self.LAYOUT.size, partition, offset, self._name_size)

    def where(self) -> tuple[str, int, int]:
        partition, offset, size = self.PLACE.unpack_from(self.memory, self.LAYOUT.size)
        start = self.LAYOUT.size + self.PLACE.size
        return self.memory[start : start + size].decode("utf-8", "replace"), partition, offset

    def begin(self, job: int, index: int) -> None:
        self._sequence += 1
        self._job, self._index = job, index
        self.LAYOUT.pack_into(self.memory, 0, self._sequence, job, index, self.RECORD)

    def state(self, state: int) -> None:
        self.LAYOUT.pack_into(self.memory, 0, self._sequence, self._job, self._index, state)

    def read(self) -> tuple[int, int, int, int]:
        sequence, job, index, state = self.LAYOUT.unpack_from(self.memory, 0)
        return sequence, job, index, state


def decode(decoding: Decoding, slot: Slot, job: int, entries: list[tuple[str, RecordTuple]]) -> list[Result]:
    results: list[Result] = []
    stopped: set[tuple[str, int]] = set()  # partitions that wait at a record of this job
    size = 0
    for index, (topic, record) in enumerate(entries):
        key = (topic, record[0])
        if key in stopped or size > ANSWER_BYTES:
            results.append(False)
            continue
        slot.at(topic, record[0], record[1])
        slot.begin(job, index)
        try:
            decoded = decoding.record(topic, record)
        except Waiting as waiting:
            results.append(str(waiting) or "the registry cannot be reached")
            stopped.add(key)
            continue
        results.append(decoded)
        if decoded is not None:
            size += len(decoded[3] or b"") + len(decoded[2] or b"")
    slot.state(Slot.IDLE)
    return results


def serve(conn: Connection, slot: Slot) -> None:
    decoding = Decoding()
    timing.listen(lambda busy: slot.state(Slot.SCHEMA if busy else Slot.RECORD))
    while True:
        try:
            command: Any = conn.recv()
        except (EOFError, OSError):
            return
        if command[0] == "models":
            decoding.use(command[1])
        elif command[0] == "decode":
            _, job, entries = command
            results = decode(decoding, slot, job, entries)
            skipped, decoded = decoding.tally.take()
            try:
                conn.send(("done", job, results, skipped, decoded))
            except OSError:
                return


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the worker decides, its owner stops this
    log_to_stderr()
    fd, slot_fd, memory_mb = (int(argument) for argument in sys.argv[1:4])
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a MemoryError, not the OOM killer's choice
    sys.setrecursionlimit(RECURSION_LIMIT)
    slot = Slot(slot_fd)
    os.close(slot_fd)
    serve(Connection(fd), slot)


if __name__ == "__main__":
    main()
