"""Records decoded where they are fetched: each record's key and value turned into JSON once, before the worker
sees it. Django-free: the decoder processes import it (streams/kafka/decoder_process.py), and the consumer
processes that own them its `Models` and `Tally`.

A topic with key or value models (`TopicModels`, matched by `models_for`) has its records decoded by the schema
codecs (streams/codecs/schemas/, docs/schemas.md) within the models' `Limits`; a topic without any is passed
through as it is. Each record ends one of three ways (`Decoding.record`):

- **decoded**: its key and value replaced by their JSON (a null stays null);
- **skipped**: it does not decode, whatever the reason (a `DecodeError` but `registry-unavailable`, or any other
  exception, counted as `crashed`): dropped from what streams see, counted per topic and reason, and logged once
  per topic and reason per minute, with where it is and why, never with its bytes;
- **waiting** (`Waiting` raised): its schema is in a registry that cannot be reached and no cached answer stands
  in. Such a record is not the record's fault: it is never skipped. Its partition waits at it (`DecodeQueue`,
  streams/kafka/decode_queue.py), and it is tried again until the registry answers.

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
    Limits,
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
_T = TypeVar("_T")


@dataclass(frozen=True)
class Budgets:
    """What the decoder process of a consumer process may spend (settings `DECODE_BUDGET_MS`, `DECODE_MEMORY_MB`):
    `record_ms` of one record's own work (schema work, a registry's answer or a compile, has timeouts of its own),
    and `memory_mb` of address space, past which an allocation fails (the record is skipped as `crashed`) instead
    of the kernel's OOM killer ending a process."""

    record_ms: int = 1000
    memory_mb: int = 1024


DEFAULT_LIMITS, DEFAULT_BUDGETS = Limits(), Budgets()


@dataclass(frozen=True)
class Models:
    """Everything decoding needs: the catalogs, the key/value models of topics, and the bounds on one record's
    work (`Limits`, the settings `DECODE_*`; the decoder process's budgets too: `Budgets`). Picklable, sent as it
    is to the consumer processes."""

    catalogs: tuple[CatalogSpec, ...] = ()
    topics: tuple[TopicModels, ...] = ()
    limits: Limits = DEFAULT_LIMITS
    budgets: Budgets = DEFAULT_BUDGETS

    @classmethod
    def of(
        cls,
        catalogs: Iterable[Any],
        topics: Iterable[Any],
        limits: Limits | None = None,
        budgets: Budgets | None = None,
    ) -> Models:
        """Models from any dataclasses that mirror spec.py's field for field (the control plane's selectors):
        copied into spec.py's own, so the consumer processes unpickle them without importing the control plane."""
        return cls(
            tuple(_copy(CatalogSpec, catalog, schemas=_each(InlineSchema)) for catalog in catalogs),
            tuple(_copy(TopicModels, rule, key=_one(ModelSpec), value=_one(ModelSpec)) for rule in topics),
            limits or Limits(),
            budgets or Budgets(),
        )

    def decodes(self, topic: str) -> bool:
        """Whether `topic`'s records are decoded (a key or value model names it)."""
        rule = models_for(topic, self.topics)
        return rule is not None and (rule.key is not None or rule.value is not None)


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
        """The record with its key and value as JSON; None when it is skipped. Raises `Waiting`, nothing else."""
        partition, offset, key, value, headers, timestamp, key_json = record
        try:
            decoders = self._decoders(topic)
            if decoders is None:
                return record
            key_json = key_json or decoders[0] is not _PASS
            key, value = decoders[0].decode(key), decoders[1].decode(value)
        except DecodeError as exc:
            if exc.reason is Reason.REGISTRY_UNAVAILABLE:
                raise Waiting(exc.detail or str(exc.reason)) from None
            self.skipped(topic, partition, offset, exc)
            return None
        except Exception as exc:  # a bug of ours or a library's, a MemoryError: the record's, not the process's
            self.skipped(topic, partition, offset, DecodeError(Reason.CRASHED, f"{type(exc).__name__}: {exc}"[:300]))
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
            return decoder_for(spec, self._catalogs, topic, part, self.models.limits)
        except (SchemaError, LookupError) as exc:  # LookupError: an unknown character set
            log.error("topic %s: its %s model cannot decode anything (%s); its records are skipped", topic, part, exc)
            return _Broken(f"the {part} model: {exc}")

    def skipped(self, topic: str, partition: int, offset: int, error: DecodeError) -> None:
        """Count and log (at most once a minute per topic and reason) a record skipped."""
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
