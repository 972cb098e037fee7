"""One stream's view of a topic: turns records into SSE bytes, with no I/O of its own.

It keeps the progress map behind the event ids, applies the route's filters, and on compacted topics holds
back each partition's records up to the end as of subscribe time, then sends only the latest per key (docs/contract.md
§5). It also decides when the opt-in `caught-up` event is due (docs/contract.md §7).
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from streams.codecs import sse
from streams.codecs.event_id import OFFSET_EARLIEST, encode_pair, encode_parts, etag_id_from, key_id_from
from streams.events.conflation import Conflation
from streams.events.deltas import Deltas, DeltaState
from streams.events.start_plan import Reset
from streams.kafka.client import Record
from streams.routes.filters import CompiledFilter, matches_any
from streams.routes.projection import Projection

RESET = b"reset"
CAUGHT_UP = b"caught-up"


@dataclass(frozen=True)
class Position:
    """Where a subscription stands: its progress, and the encoded form the next event id is built from."""

    progress: dict[int, int]
    parts: dict[int, bytes]
    text: bytes | None
    sent: DeltaState | None = None  # with deltas: what was last sent of each key (shared, never changed in place)


@dataclass(frozen=True)
class SubscriptionOptions:
    """How a subscription writes its events. A subscription keeps the one shared object of its value (`shared`),
    so the fan-out's share key, built for every stream at every batch, holds it by identity; the shared reads'
    key holds it by value, with its hash computed once."""

    filters: tuple[CompiledFilter, ...] = ()
    key_form: bool = False  # ids as ["<base64 key>","<etag id>"]
    compacted: bool = False  # send only the latest value per key up to `ends`
    caught_up: bool = False  # send `caught-up` once every partition reached `ends`
    projection: Projection | None = None  # the parts of each JSON value sent (shared, hashed by identity)
    conflate_ms: int = 0  # at most one event per key per this many ms (0: every event)
    deltas: bool = False  # a key's value whole once, then merge patches when shorter (`event:patch`)

    def __post_init__(self) -> None:
        shape = (self.filters, self.key_form, self.compacted, self.caught_up, self.projection, self.conflate_ms)
        object.__setattr__(self, "_hash", hash((*shape, self.deltas)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def shared(self) -> SubscriptionOptions:
        """The one object of this value that the process's subscriptions hold (kept while any holds it)."""
        return _SHARED_OPTIONS.setdefault(self, self)


_SHARED_OPTIONS: weakref.WeakValueDictionary[SubscriptionOptions, SubscriptionOptions] = weakref.WeakValueDictionary()


BEGINNINGS_KEPT = 256  # the places subscriptions began in lately, each kept with its dicts (`_beginning`)
_beginnings: dict[tuple[tuple[int, int], ...], tuple[dict[int, int], dict[int, bytes]]] = {}


def _beginning(progress: Mapping[int, int]) -> tuple[dict[int, int], dict[int, bytes]]:
    """The progress and encoded parts a subscription begins with, shared with those that began in the same place
    lately: never changed in place (`Progress._make_own` copies them first)."""
    key = tuple(progress.items())
    found = _beginnings.get(key)
    if found is None:
        if len(_beginnings) >= BEGINNINGS_KEPT:
            del _beginnings[next(iter(_beginnings))]  # the oldest
        fresh = dict(key)
        found = _beginnings[key] = (fresh, {p: encode_pair(p, o) for p, o in fresh.items()})
    return found


def shared_offsets(offsets: Mapping[int, int]) -> dict[int, int]:
    """A dict equal to `offsets`, the one every caller with these offsets got lately (streams that begin in one
    place read from the same cursors): never to be changed in place."""
    return _beginning(offsets)[0]


class Progress:
    """Where a subscription stands, as its event ids say it: each partition's next offset (`progress`), its
    encoded entry (kept so that an id re-encodes only the partition that moved), the id text once encoded, and
    the events delivered to get there. Once handed out (`standpoint`, `adopt`) the dicts are replaced, never changed
    in place, so subscriptions in one place share them; until then they are its own (`_own`) and change in place.
    Subscriptions that begin in the same place begin with the same dicts (`_beginning`): thousands of idle
    streams at a topic's end hold one pair, not one each. With `log_batches`, it keeps each record delivered and
    its size until `take_batch()`, for the delivery log. The base of `Subscription`, whose feeding moves it."""

    def __init__(self, progress: Mapping[int, int], *, log_batches: bool = False) -> None:
        self.progress, self._parts = _beginning(progress)
        self._own = False  # whether `progress` and `_parts` are this one's alone, and change in place
        self._text: bytes | None = None
        self.delivered = 0
        self.batch: list[tuple[Record, int]] | None = [] if log_batches else None
        self._deltas: Deltas | None = None  # a subscription sending deltas: part of where it stands

    def batch_length(self) -> int:
        return 0 if self.batch is None else len(self.batch)

    def take_batch(self) -> list[tuple[Record, int]]:
        """The records delivered since the last call, each with the bytes its event took; empty if not kept."""
        batch = self.batch
        if not batch:
            return []
        self.batch = []
        return batch

    def standpoint(self) -> Position:
        """Its `position`, not copied, for subscriptions that take it as it is (`adopt`): `progress` and the
        encoded parts are replaced, never changed in place, so they can be shared."""
        self._own = False
        return Position(self.progress, self._parts, self._text, self.sent())

    def adopt(self, standpoint: Position, delivered: int) -> None:
        """Stand where a settled subscription stood (its `standpoint`) after feeding what this one would have
        been fed, `delivered` events. (Only a stream at the live end adopts, streams/stream/pump.py: it has
        reached its ends already.)"""
        self.progress, self._parts, self._text = standpoint.progress, standpoint.parts, standpoint.text
        self._own = False
        self.delivered += delivered
        if self._deltas is not None and standpoint.sent is not None:
            self._deltas.take(standpoint.sent)

    def position(self) -> Position:
        return Position(dict(self.progress), dict(self._parts), self._text, self.sent())

    def _make_own(self) -> None:
        """Before `progress` or `_parts` change: copies of them if they were handed out."""
        if not self._own:
            self.progress, self._parts, self._own = dict(self.progress), dict(self._parts), True

    def sent(self) -> DeltaState | None:
        """With deltas, what it last sent of each key: one object for every subscription in the same state (its
        identity is part of the share keys), never changed in place; None without deltas."""
        return None if self._deltas is None else self._deltas.state

    def take(self, position: Position, delivered: int) -> None:
        """Stand at `position`, reached by feeding what this one would have been fed: `delivered` events (which
        whoever hands the position over counts in the delivery log)."""
        self.progress = dict(position.progress)
        self._parts = dict(position.parts)
        self._own = True
        self._text = position.text
        if self._deltas is not None and position.sent is not None:
            self._deltas.take(position.sent)
        self.delivered += delivered


class Ends:
    """Each partition's end as of subscribe time (`_ends`), and the partitions read up to theirs (`_reached`): a base
    of `Subscription`. Both are None once every partition reached its end and nothing is held back (`_held`), as
    for every stream that starts at the live end: they decide nothing more, and an open stream holds neither."""

    _ends: dict[int, int] | None
    _reached: set[int] | None
    _held: dict[int, dict[object, Record]]
    progress: dict[int, int]

    @property
    def reached_ends(self) -> bool:
        """Every partition was read up to its end as of subscribe time (where `caught-up` is due): from here on,
        what the stream reads was produced after it began."""
        return self._ends is None or len(self._reached or ()) >= len(self._ends)

    def _settle_ends(self) -> None:
        if self._ends is not None and not self._held and self.reached_ends:
            self._ends = self._reached = None

    def _reach_taken(self) -> None:
        """The partitions a position taken (`take`) put at their ends have reached them, as if fed."""
        ends, reached = self._ends, self._reached
        if ends is not None and reached is not None and len(reached) < len(ends):
            reached.update(p for p, end in ends.items() if self.progress.get(p, -1) >= end)
            self._settle_ends()

    def _grow_ends(self, partition: int) -> None:
        """A partition added after the subscription began has reached its end (0) at once."""
        if self._ends is not None and self._reached is not None:  # else every partition has
            self._ends[partition] = 0
            self._reached.add(partition)


class Subscription(Progress, Ends):
    """One stream's view of a topic (the module's docstring says what it does): where it stands (`Progress`),
    each partition's end as of subscribe time and whether it was reached, and on compacted topics what is held
    back until then."""

    def __init__(
        self,
        progress: Mapping[int, int],
        *,
        ends: Mapping[int, int],
        starts: Mapping[int, int],
        options: SubscriptionOptions,
        log_batches: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`ends`: each partition's end as of subscribe time; `starts`: the first offset to be read.
        `log_batches`: keep each delivered record and its size until `take_batch()`, for the delivery log.
        `clock`: the time conflation reads (the event loop's)."""
        super().__init__(progress, log_batches=log_batches)
        self.options = options.shared()
        self._ends: dict[int, int] | None = dict(ends)  # `Ends`
        self._reached: set[int] | None = {p for p, end in self._ends.items() if starts.get(p, end) >= end}
        # Compacted topics: records held back per partition until it reaches its end, latest per key.
        self._held: dict[int, dict[object, Record]] = (
            {p: {} for p in self._ends if p not in self._reached} if options.compacted else {}
        )
        self._settle_ends()
        self._caught_up_sent = not options.caught_up
        self._conflation = Conflation(options.conflate_ms) if options.conflate_ms else None
        self._deltas = Deltas(options.projection) if options.deltas else None
        self._clock = clock

    @property
    def settled(self) -> bool:
        """Nothing held back and nothing still to announce: the output then depends only on the options, the
        progress and the records, so subscriptions equal in those write the same bytes. A conflating one never is:
        what it sends depends on when it sent each key. (One sending deltas is: what it last sent of each key is part
        of where it stands, `Position.sent`.)"""
        return not self._held and self._caught_up_sent and self._conflation is None

    def next_due(self) -> float | None:
        """When a record conflation holds back is due (a `feed`, of nothing if need be, sends it), on the
        subscription's clock; None if none is."""
        return None if self._conflation is None else self._conflation.next_due()

    def take(self, position: Position, delivered: int) -> None:
        super().take(position, delivered)
        self._reach_taken()

    def grow(self, partitions: Iterable[int]) -> None:
        """Partitions added to the topic after this subscription began: listed in the ids from now on as nothing
        delivered yet (-2, read from the earliest on resuming), and delivered as they come, since every record of
        theirs is newer than the subscription (no compaction snapshot, and caught-up does not wait for them)."""
        self._make_own()
        for partition in partitions:
            if partition not in self.progress:
                self.progress[partition] = OFFSET_EARLIEST
                self._parts[partition] = encode_pair(partition, OFFSET_EARLIEST)
                self._grow_ends(partition)
                self._text = None

    def event_id(self, record: Record | None) -> bytes:
        etag = None if record is None else record.header("etag")
        if self._text is None:
            self._text = encode_parts(self._parts)
        if self.options.key_form:
            return key_id_from(None if record is None else record.key, self._text, etag)
        return etag_id_from(self._text, etag)

    def preamble(self, resets: Sequence[Reset]) -> bytes:
        """What follows the retry line: the reset notice, and caught-up when there is nothing to replay."""
        out = []
        if resets:
            data = {"partitions": [{"partition": r.partition, "requested": r.requested, "earliest": r.earliest}
                                   for r in resets]}  # fmt: skip
            out.append(sse.event(json.dumps(data).encode(), event_id=self.event_id(None), event_type=RESET))
        out.append(self._caught_up_if_due())
        return b"".join(out)

    def feed(self, records: Iterable[Record], eof: Iterable[int] = (), *, conflate: bool = False) -> bytes:
        """The bytes to send for a batch of records (in partition order) and partitions seen at their end.

        With `conflate`, only the latest record per key of the batch is sent (a partition's last record always
        is, so the id still moves past the whole batch); records without a key are all sent.
        """
        out: list[bytes] = []
        if conflate:
            records = _latest_per_key(records)
        if self._deltas is not None:
            self._deltas.begin()
        if self._conflation is not None and self._conflation.waiting:  # what waited goes before what is newer
            for record in self._conflation.due(self._clock()):
                self._emit(record, out)
        ends, reached = self._ends, self._reached
        for record in records:
            if ends is None or reached is None:  # every partition reached its end, nothing held: as it comes
                self._deliver(record, out)
                continue
            partition, end = record.partition, ends.get(record.partition, 0)
            if partition in self._held and record.offset < end:
                # Null keys never supersede each other: each is its own entry.
                self._held[partition][record.key if record.key is not None else ("offset", record.offset)] = record
            else:
                if partition in self._held:
                    self._reach(partition, out)  # the held snapshot goes first, then live records
                self._deliver(record, out)
            if partition not in reached and record.offset + 1 >= end:
                self._reach(partition, out)
        for partition in eof:
            if reached is not None and partition not in reached:
                self._reach(partition, out)
        out.append(self._caught_up_if_due())
        self._settle_ends()
        if self._deltas is not None:
            self._deltas.settle()
        return b"".join(out)

    def _reach(self, partition: int, out: list[bytes]) -> None:
        if self._reached is not None:
            self._reached.add(partition)
        for record in sorted(self._held.pop(partition, {}).values(), key=lambda r: r.offset):
            self._deliver(record, out)

    def _deliver(self, record: Record, out: list[bytes]) -> None:
        if not self._own:
            self._make_own()
        self.progress[record.partition] = record.offset + 1
        self._parts[record.partition] = encode_pair(record.partition, record.offset + 1)
        self._text = None
        if not matches_any(self.options.filters, record):
            return
        if self._conflation is None or self._conflation.admit(record, self._clock()):
            self._emit(record, out)

    def _emit(self, record: Record, out: list[bytes]) -> None:
        projection = self.options.projection
        body = record.body if projection is None else projection.body(record)
        if self._deltas is not None:
            body = self._deltas.body(record, body)
        event = b"id:" + self.event_id(record) + b"\n" + body
        out.append(event)
        self.delivered += 1
        if self.batch is not None:
            self.batch.append((record, len(event)))

    def _caught_up_if_due(self) -> bytes:
        if self._caught_up_sent or not self.reached_ends:
            return b""
        self._caught_up_sent = True
        return sse.event(b"", event_id=self.event_id(None), event_type=CAUGHT_UP)


def _latest_per_key(records: Iterable[Record]) -> list[Record]:
    latest: dict[object, Record] = {}
    for record in records:
        key = (record.partition, record.key) if record.key is not None else (record.partition, "offset", record.offset)
        latest[key] = record
    return sorted(latest.values(), key=lambda r: (r.partition, r.offset))
