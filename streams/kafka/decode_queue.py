"""The fetch process's records on their way through its decoder process: per partition, in order, from fetched to
decoded. Pure bookkeeping, no I/O: the fetch process (streams/kafka/fetch_process.py) feeds it, hands its jobs to
the decoder (streams/kafka/decoder.py) and sends what comes back.

Only the records of topics with models come here; the others go to the worker as they are fetched, and never wait
for a record being decoded. A partition with nothing here has its records decoded as the poll brings them, and
only those from the first that waits, or was not tried, come here (`now`). A partition's records are decoded in
order and go out in order: those fetched while earlier ones are here queue behind them. A partition **blocks** (its
consumer partition stays paused, whatever the worker says) while its records wait for their schema registry, or
while more than `BLOCK_BYTES` of them wait to be decoded; it fetches again once neither holds. Its end (Kafka's end
of the partition, reached) is told only once nothing of it waits.

States of a partition here, as `Pending` holds them: queued (records, none in a job) -> in a job (the first `in_job`
records) -> done: decoded ones out, skipped ones gone, from the first that waits on held with `why` until
`retry_at`, from the first not tried on queued again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from streams.kafka.decoder_process import Result
from streams.kafka.records import RecordTuple

Key = tuple[str, int]
RETRY_S = 1.0  # a partition waiting for its registry tries again this often (the client backs off by itself)
BLOCK_BYTES = 4 * 1024 * 1024  # a partition with more than this waiting to be decoded fetches no more meanwhile


@dataclass
class Pending:
    epoch: int  # the assignment the records were fetched under: a job's results for an older one are dropped
    records: list[RecordTuple] = field(default_factory=list)
    size: int = 0  # bytes of keys and values in `records`
    in_job: int = 0  # the first records, in the decoder's job now
    why: str = ""  # waiting for the registry: why
    retry_at: float = 0.0
    eof: bool = False  # the consumer reached Kafka's end after these records


class DecodeQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.pending: dict[Key, Pending] = {}
        self._job: list[tuple[Key, int, int]] = []  # (partition, epoch, records) in the job's order

    def __contains__(self, key: Key) -> bool:
        return key in self.pending

    def add(self, key: Key, epoch: int, records: list[RecordTuple], waits: str = "") -> None:
        """Queue `records` behind those of the partition queued already; `waits`: the first waits for its registry
        (why), as a job's result said (`now`)."""
        found = self.pending.get(key)
        if found is None or found.epoch != epoch:
            found = self.pending[key] = Pending(epoch)
        last = found.records[-1][1] if found.records else -1
        fresh = [record for record in records if record[1] > last]  # a paused partition's fetch may repeat some
        found.records.extend(fresh)
        found.size += sum(_size(record) for record in fresh)
        if waits:
            found.why, found.retry_at = waits, self._clock() + RETRY_S

    def now(self, key: Key, epoch: int, records: list[RecordTuple], results: list[Result]) -> list[RecordTuple]:
        """The records of a partition with nothing queued, decoded at once as the poll brought them (one result per
        record, as a job's): those decoded. From the first that waits for its registry, or was not tried, they
        are queued as `done` would leave them. A live topic's usual way: its records come one or two per poll,
        and a job's bookkeeping for them cost several per cent of the fetch process's CPU."""
        decoded: list[RecordTuple] = []
        for index, result in enumerate(results):
            if isinstance(result, tuple):
                decoded.append(result)
            elif result is not None:  # str: waits for its registry (why); False: not tried, due now
                self.add(key, epoch, records[index:], waits=result if isinstance(result, str) else "")
                break
        return decoded

    def eof(self, key: Key) -> bool:
        """The consumer reached the partition's end: True if that can be told now, else it is told by `done`."""
        found = self.pending.get(key)
        if found is None:
            return True
        found.eof = True
        return False

    def job(self, max_records: int, max_bytes: int) -> list[tuple[str, RecordTuple]]:
        """The next job: the records due of every partition not in a job, a partition's whole queue at a time
        (the first partition's at least), within `max_records` and `max_bytes`."""
        now = self._clock()
        entries: list[tuple[str, RecordTuple]] = []
        size = 0
        for key, found in self.pending.items():
            if found.in_job or not found.records or found.retry_at > now:
                continue
            taken = found.records[: max_records - len(entries)]
            taken_size = sum(_size(record) for record in taken)
            if entries and size + taken_size > max_bytes:
                continue
            found.in_job = len(taken)
            size += taken_size
            entries.extend((key[0], record) for record in taken)
            self._job.append((key, found.epoch, len(taken)))
            if len(entries) >= max_records:
                break
        return entries

    def done(self, results: list[Result]) -> tuple[dict[Key, list[RecordTuple]], list[Key]]:
        """The job's results, one per entry in order: the records that go out per partition, and the partitions
        whose end can be told now."""
        out: dict[Key, list[RecordTuple]] = {}
        ends: list[Key] = []
        position = 0
        now = self._clock()
        for key, epoch, count in self._job:
            mine, position = results[position : position + count], position + count
            found = self.pending.get(key)
            if found is None or found.epoch != epoch:
                continue  # unassigned, or assigned again, while it was decoded
            records, rest = found.records[:count], found.records[count:]
            decoded: list[RecordTuple] = []
            held: list[RecordTuple] = []
            found.why, found.retry_at = "", 0.0
            for index, result in enumerate(mine):
                if isinstance(result, tuple):
                    decoded.append(result)
                elif isinstance(result, str):  # waits for its registry: it and what follows
                    held = records[index:]
                    found.why, found.retry_at = result, now + RETRY_S
                    break
                elif result is False:  # not tried: queued again, due now
                    held = records[index:]
                    break
            found.records, found.in_job = held + rest, 0
            found.size = sum(_size(record) for record in found.records)
            if decoded:
                out[key] = decoded
            if not found.records:
                del self.pending[key]
                if found.eof:
                    ends.append(key)
        self._job = []
        return out, ends

    def drop(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self.pending.pop(key, None)

    def blocked(self) -> set[Key]:
        """The partitions whose consumer partition must stay paused."""
        return {key for key, found in self.pending.items() if found.why or found.size > BLOCK_BYTES}

    def waiting(self) -> dict[Key, str]:
        """The partitions waiting for their schema registry, with why (readiness names them)."""
        return {key: found.why for key, found in self.pending.items() if found.why}

    def retry_soon(self) -> None:
        """Try the waiting partitions at once (a catalog may have changed its URL)."""
        for found in self.pending.values():
            found.retry_at = 0.0


def _size(record: RecordTuple) -> int:
    return len(record[2] or b"") + len(record[3] or b"")
