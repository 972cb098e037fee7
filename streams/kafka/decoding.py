"""Records decoded where they are fetched: each record's key and value turned into JSON once, in the consumer
processes, before the worker sees it. Django-free: the fetch process and the historical readers' host import it.

A topic with key or value models (`TopicModels`, matched by `models_for`) has its records decoded by the schema
codecs (streams/codecs/schemas/, docs/schemas.md); a topic without any is passed through as it is. Each record
ends one of three ways (`Decoding.record`):

- **decoded**: its key and value replaced by their JSON (a null stays null);
- **skipped**: it does not decode (any `DecodeError` but `registry-unavailable`): dropped from what streams see,
  counted per topic and reason, and logged once per topic and reason per minute;
- **waiting** (`Waiting` raised): its schema is in a registry that cannot be reached and no cached answer stands
  in. Such a record is not the record's fault: it is never skipped. Its partition waits at it (`Holds`), and it
  is tried again until the registry answers.

The worker hands the models over as one `Models`, from the route table's reload (streams/routes/table.py). What
the processes counted comes back to the worker as deltas and adds up in `DecodeStats`, which the metrics read.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from streams.codecs.schemas import (
    Catalogs,
    CatalogSpec,
    DecodeError,
    Decoder,
    InlineSchema,
    ModelSpec,
    Reason,
    SchemaError,
    TopicModels,
    decoder_for,
    models_for,
)
from streams.codecs.schemas.spec import Part
from streams.kafka.records import RecordTuple

log = logging.getLogger("streams.kafka.decoding")

Key = tuple[str, int]
LOG_EVERY_S = 60.0  # one log line per topic and reason at most this often
RETRY_S = 1.0  # a partition waiting for its registry tries again this often (the client backs off by itself)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Models:
    """Everything decoding needs: the catalogs, and the key/value models of topics. Picklable, sent as it is to
    the consumer processes."""

    catalogs: tuple[CatalogSpec, ...] = ()
    topics: tuple[TopicModels, ...] = ()

    @classmethod
    def of(cls, catalogs: Iterable[Any], topics: Iterable[Any]) -> Models:
        """Models from any dataclasses that mirror spec.py's field for field (the control plane's selectors):
        copied into spec.py's own, so the consumer processes unpickle them without importing the control plane."""
        return cls(
            tuple(_copy(CatalogSpec, catalog, schemas=_each(InlineSchema)) for catalog in catalogs),
            tuple(_copy(TopicModels, rule, key=_one(ModelSpec), value=_one(ModelSpec)) for rule in topics),
        )


def _copy(kind: type[_T], source: Any, **convert: Callable[[Any], Any]) -> _T:
    values = {}
    for found in dataclasses.fields(kind):  # type: ignore[arg-type]
        value = getattr(source, found.name, dataclasses.MISSING)
        if value is dataclasses.MISSING:
            continue  # the field's default
        values[found.name] = convert[found.name](value) if found.name in convert else value
    return kind(**values)


def _each(kind: type[_T]) -> Callable[[Any], tuple[_T, ...]]:
    return lambda items: tuple(_copy(kind, item) for item in items or ())


def _one(kind: type[_T]) -> Callable[[Any], _T | None]:
    return lambda item: None if item is None else _copy(kind, item)


class Waiting(Exception):
    """The record's schema is in a registry that cannot be reached, and nothing cached stands in."""


@dataclass
class Tally:
    """What a consumer process decoded and skipped since it last reported (`take`)."""

    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, reason) -> records
    decoded: Counter[str] = field(default_factory=Counter)  # topic -> records decoded

    def take(self) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
        skipped, decoded = dict(self.skipped), dict(self.decoded)
        self.skipped.clear()
        self.decoded.clear()
        return skipped, decoded


class _Broken:
    """A part whose model cannot work (no such catalog, an `avro` model without one): every record is skipped."""

    def __init__(self, why: str) -> None:
        self.why = why

    def decode(self, raw: bytes | None) -> bytes | None:
        raise DecodeError(Reason.SCHEMA_MISMATCH, self.why)


class _Pass:
    def decode(self, raw: bytes | None) -> bytes | None:
        return raw


_PASS = _Pass()


class Decoding:
    """One consumer process's decoders: built per topic on first use, all dropped when the models change (a
    registry's client and its cache are kept while its catalog is unchanged). Thread-safe: the historical
    readers' threads share one."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.models = Models()
        self._catalogs = Catalogs(())
        self._topics: dict[str, tuple[Decoder, Decoder] | None] = {}
        self.tally = Tally()
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # last line, records skipped since

    def use(self, models: Models) -> bool:
        """Decode with `models` from now on; whether they changed."""
        with self._lock:
            if models == self.models:
                return False
            self.models = models
            self._catalogs = self._catalogs.updated(models.catalogs)
            self._topics = {}
            return True

    def record(self, topic: str, record: RecordTuple) -> RecordTuple | None:
        """The record with its key and value as JSON; None when it is skipped. Raises `Waiting`."""
        decoders = self._decoders(topic)
        if decoders is None:
            return record
        partition, offset, key, value, headers, timestamp, key_json = record
        try:
            key_json = key_json or decoders[0] is not _PASS
            key, value = decoders[0].decode(key), decoders[1].decode(value)
        except DecodeError as exc:
            if exc.reason is Reason.REGISTRY_UNAVAILABLE:
                raise Waiting(exc.detail or str(exc.reason)) from None
            self._skipped(topic, partition, offset, exc)
            return None
        with self._lock:
            self.tally.decoded[topic] += 1
        return partition, offset, key, value, headers, timestamp, key_json

    def _decoders(self, topic: str) -> tuple[Decoder, Decoder] | None:
        topics = self._topics  # replaced whole when the models change
        if topic in topics:
            return topics[topic]
        with self._lock:
            rule = models_for(topic, self.models.topics)
            built = None
            if rule is not None and (rule.key is not None or rule.value is not None):
                built = (self._part(rule.key, topic, "key"), self._part(rule.value, topic, "value"))
            self._topics[topic] = built
            return built

    def _part(self, spec: ModelSpec | None, topic: str, part: Part) -> Decoder:
        if spec is None:
            return _PASS
        try:
            return decoder_for(spec, self._catalogs, topic, part)
        except (SchemaError, LookupError) as exc:  # LookupError: an unknown character set
            log.error("topic %s: its %s model cannot decode anything (%s); its records are skipped", topic, part, exc)
            return _Broken(f"the {part} model: {exc}")

    def _skipped(self, topic: str, partition: int, offset: int, error: DecodeError) -> None:
        reason = str(error.reason)
        now = self._clock()
        with self._lock:
            self.tally.skipped[(topic, reason)] += 1
            last, since = self._logged.get((topic, reason), (float("-inf"), 0))
            if now - last < LOG_EVERY_S:
                self._logged[(topic, reason)] = (last, since + 1)
                return
            self._logged[(topic, reason)] = (now, 0)
        log.warning(
            "topic %s: a record does not decode (%s), skipped: partition %d offset %d: %s (%d more since the last "
            "line)", topic, reason, partition, offset, error.detail, since,
        )  # fmt: skip


@dataclass
class Held:
    """A waiting partition's records, from the first whose schema could not be had, not decoded yet."""

    records: list[RecordTuple]
    why: str
    retry_at: float
    eof: bool = False  # the consumer reached Kafka's end after these records


class Holds:
    """The partitions of a consumer that wait for a registry. A partition waits at the first record whose decode
    raised `Waiting`: that record and those after it are held, undecoded, and its consumer partition is paused
    (by the caller) so nothing newer is fetched meanwhile. Every `RETRY_S` the held records are tried again, in
    order; those that decode are released, and once none is held the partition fetches again."""

    def __init__(self, decoding: Decoding, clock: Callable[[], float] = time.monotonic) -> None:
        self.decoding, self._clock = decoding, clock
        self.held: dict[Key, Held] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self.held

    def waiting(self) -> dict[Key, str]:
        return {key: held.why for key, held in self.held.items()}

    def take(self, key: Key, records: list[RecordTuple]) -> list[RecordTuple]:
        """The records of `key` that go out now, decoded; from the first that waits on, the rest are held."""
        held = self.held.get(key)
        if held is not None:
            last = held.records[-1][1] if held.records else -1
            held.records.extend(record for record in records if record[1] > last)
            return []
        out, rest, why = self._decode(key[0], records)
        if rest:
            self.held[key] = Held(rest, why, self._clock() + RETRY_S)
        return out

    def eof(self, key: Key) -> bool:
        """The consumer reached the partition's end: False when the partition waits (it is not at its end for the
        streams until the held records are out), noted for when they are."""
        held = self.held.get(key)
        if held is None:
            return True
        held.eof = True
        return False

    def retry(self, *, now: float | None = None) -> tuple[dict[Key, list[RecordTuple]], set[Key]]:
        """Try the held records of the partitions due again: the records that decoded per partition, and the
        partitions released (nothing held any more), whose end is reached when `eof` said so."""
        now = self._clock() if now is None else now
        out: dict[Key, list[RecordTuple]] = {}
        released: set[Key] = set()
        for key, held in list(self.held.items()):
            if now < held.retry_at:
                continue
            decoded, rest, why = self._decode(key[0], held.records)
            if decoded:
                out[key] = decoded
            if rest:
                held.records, held.why, held.retry_at = rest, why, now + RETRY_S
            else:
                released.add(key)
                del self.held[key]
                if held.eof:
                    out.setdefault(key, [])
        return out, released

    def retry_soon(self) -> None:
        for held in self.held.values():
            held.retry_at = 0.0

    def drop(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self.held.pop(key, None)

    def _decode(self, topic: str, records: list[RecordTuple]) -> tuple[list[RecordTuple], list[RecordTuple], str]:
        out: list[RecordTuple] = []
        for index, record in enumerate(records):
            try:
                decoded = self.decoding.record(topic, record)
            except Waiting as waiting:
                return out, records[index:], str(waiting)
            if decoded is not None:
                out.append(decoded)
        return out, [], ""


class DecodeStats:
    """What the worker's consumer processes decoded and skipped, added up from their reports (any thread)."""

    _lock = threading.Lock()
    skipped: ClassVar[Counter[tuple[str, str]]] = Counter()  # (topic, reason) -> records skipped
    decoded: ClassVar[Counter[str]] = Counter()  # topic -> records decoded

    @classmethod
    def add(cls, skipped: Mapping[tuple[str, str], int], decoded: Mapping[str, int]) -> None:
        with cls._lock:
            cls.skipped.update(skipped)
            cls.decoded.update(decoded)

    @classmethod
    def snapshot(cls) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
        with cls._lock:
            return dict(cls.skipped), dict(cls.decoded)
