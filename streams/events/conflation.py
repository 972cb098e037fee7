"""Conflation of one stream (docs/contract.md §7, `conflate_ms`): at most one event per key per interval, the
latest value of that key. No I/O: the subscription asks it, with the time, whether a record goes now, and for the
records whose wait is over; the pump wakes itself when the next one is due (streams/stream/intake.py).

A record whose key was sent less than an interval ago waits, replacing any record of its key already waiting; it
goes out once the interval since its key was last sent is over, with the id of the stream's progress then. A key
whose last send is older than the interval goes at once. Records without a key are never conflated. A tombstone is
a value like any other: it goes, or waits, and a later value of its key replaces it.

The subscription's progress moves past a waiting record as past any other, so an event id says "everything up to
here was sent or conflated away": a client that resumes from it is not sent what was waiting when it left, just
as it is not sent the values conflation skipped.
"""

from __future__ import annotations

from streams.kafka.client import Record

PRUNE_EVERY = 1024  # keys remembered past their interval before the memory of them is trimmed


class Conflation:
    """When each key was last sent, and the latest record of each key waiting for its interval to end."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_s = interval_ms / 1000
        self.sent_at: dict[bytes, float] = {}
        self.waiting: dict[bytes, Record] = {}
        self._prune_at = PRUNE_EVERY

    def admit(self, record: Record, now: float) -> bool:
        """Whether `record` goes now; if not, it waits (in place of any record of its key waiting)."""
        key = record.key
        if key is None:
            return True
        last = self.sent_at.get(key)
        if last is None or now - last >= self.interval_s:
            self.sent_at[key] = now
            self.waiting.pop(key, None)  # older than this one: superseded
            if len(self.sent_at) >= self._prune_at:
                self._prune(now)
            return True
        self.waiting[key] = record
        return False

    def due(self, now: float) -> list[Record]:
        """The waiting records whose interval is over, in offset order per partition; they count as sent now."""
        if not self.waiting:
            return []
        ready = [key for key in self.waiting if now - self.sent_at[key] >= self.interval_s]
        for key in ready:
            self.sent_at[key] = now
        return sorted((self.waiting.pop(key) for key in ready), key=lambda r: (r.partition, r.offset))

    def next_due(self) -> float | None:
        """When the first waiting record may go (the clock `admit` and `due` are given), or None."""
        if not self.waiting:
            return None
        return min(self.sent_at[key] for key in self.waiting) + self.interval_s

    def _prune(self, now: float) -> None:
        """Forget keys sent longer ago than the interval (as if never sent: they go at once either way)."""
        self.sent_at = {k: t for k, t in self.sent_at.items() if now - t < self.interval_s or k in self.waiting}
        self._prune_at = len(self.sent_at) + PRUNE_EVERY
