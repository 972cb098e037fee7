"""A topic part's decoder: record bytes in, compact JSON (UTF-8) out, or a `DecodeError` with its reason.

`decoder_for` reads a `ModelSpec` once and returns a decoder whose `decode` runs once per record, in the fetch
process. The forms each model's values take are in docs/schemas.md.

- A registry catalog's records are framed (`framing.py`): each decodes with the schema of its own id, so records
  written before a schema changed decode with the schema they were written with. The id must be one the model
  allows, or the record is a `schema-mismatch` and its schema is not even fetched: the model's id (`strategy:
  id`), else an id the model's subject holds (`<topic>-key` / `<topic>-value` for `strategy: topic`; a subject
  may hold `*`), at the model's version unless that is `latest`. Anyone who may produce to a topic may register
  schemas too (Confluent's serializers do by themselves): a record naming another subject's schema, a hostile one
  or another team's, is refused before that schema is read. The id's schema must be of the model's format.
- An inline catalog's records are the plain encoding: the schema is the catalog's, by the model's subject (or
  `<topic>-key` / `<topic>-value` for `strategy: topic`) and version, and for Protobuf the message by `record`.
- `json` without a catalog is only parsed; `string` and the numbers need no schema.

A null (a tombstone's value, a record without a key) stays None: it is no JSON value of the model.

Every decoder keeps to its `Limits` (limits.py): a key or value longer than `max_bytes` is not read, and what it
decodes to is measured against every bound (a JSON record's text before its schema checks it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from streams.codecs.schemas import avro, json_values, protobuf, scalars
from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.framing import message_indexes, unframe
from streams.codecs.schemas.limits import Limits
from streams.codecs.schemas.registry_answers import Schema
from streams.codecs.schemas.sources import Catalogs, SchemaSource, referenced
from streams.codecs.schemas.spec import ModelSpec, Part, SchemaFormat, matches, topic_subject

_T = TypeVar("_T")
KNOWN_S = 1.0  # how long a registry catalog's decoder uses what it found an id to be without asking the cache
KNOWN_IDS = 64
_LIMITS = Limits()
Read = Callable[[Schema, tuple[tuple[str, Schema], ...], memoryview, Limits], Any]


class Decoder(Protocol):
    def decode(self, raw: bytes | None) -> bytes | None: ...


def dumps(value: Any, limits: Limits) -> bytes:
    """Compact JSON in UTF-8, with no NaN (the converters wrote those as strings already), within `limits`."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, TypeError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise DecodeError(Reason.INVALID, f"no JSON for the value: {exc}") from None
    limits.check_json(text)
    return text


class _Plain:
    """A model decoded without a schema."""

    def __init__(self, to_json: Callable[[bytes | memoryview], bytes], limits: Limits) -> None:
        self._to_json, self._limits = to_json, limits

    def decode(self, raw: bytes | None) -> bytes | None:
        if raw is None:
            return None
        self._limits.check_size(raw)
        text = self._to_json(raw)
        self._limits.check_size(text)
        return text


class _Framed:
    """A registry catalog's records: the schema by the id each one carries, if the model allows that id."""

    def __init__(
        self, spec: ModelSpec, source: SchemaSource, topic: str, part: Part, *, budget: protobuf.Budget, limits: Limits
    ) -> None:
        self._format: SchemaFormat = _schema_format(spec)
        self._pinned = spec.schema_id
        self._subject = spec.subject or topic_subject(topic, part)  # the topic strategy when nothing names one
        self._version = spec.version
        self._source = source
        self._read = _READS[self._format]
        self._budget = budget
        self._limits = limits
        # What an id was found to be a moment ago: the registry's cache answers the same, at the cost of two
        # lookups a record; this stands in for KNOWN_S, then the registry's cache (and its max-age) is asked again.
        self._known: dict[int, tuple[Schema, tuple[tuple[str, Schema], ...], float]] = {}

    def decode(self, raw: bytes | None) -> bytes | None:
        if raw is None:
            return None
        self._limits.check_size(raw)
        schema_id, payload = unframe(raw)
        schema, imports = self._schema(schema_id)
        if self._format == "protobuf":
            indexes, payload = message_indexes(payload)
            value = _read_protobuf(schema, imports, payload, self._limits, indexes=indexes, budget=self._budget)
            return dumps(value, self._limits)
        return dumps(self._read(schema, imports, payload, self._limits), self._limits)

    def _schema(self, schema_id: int) -> tuple[Schema, tuple[tuple[str, Schema], ...]]:
        """The schema of `schema_id` and what it imports, once the model allows the id."""
        now = time.monotonic()
        known = self._known.get(schema_id)
        if known is not None and now < known[2]:
            return known[0], known[1]
        self._allow(schema_id)
        schema = self._source.by_id(schema_id)
        if schema.format != self._format:
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"schema {schema_id} is {schema.format}, not {self._format}")
        imports = referenced(schema, self._source)
        if len(self._known) >= KNOWN_IDS:
            self._known.clear()
        self._known[schema_id] = (schema, imports, now + KNOWN_S)
        return schema, imports

    def _allow(self, schema_id: int) -> None:
        """Refuse an id the model does not allow (the registry's answer on which subjects hold it is cached)."""
        if self._pinned is not None:
            if schema_id != self._pinned:
                raise DecodeError(Reason.SCHEMA_MISMATCH, f"schema {schema_id} is not the model's, {self._pinned}")
            return
        held = self._source.subjects_of(schema_id)
        if not any(
            matches(self._subject, subject) and self._version in ("latest", version) for subject, version in held
        ):
            version = "" if self._version == "latest" else f" version {self._version}"
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"schema {schema_id} is not {self._subject!r}{version}'s")


class _Inline:
    """An inline catalog's records: one schema, by subject and version, for every record."""

    def __init__(
        self, spec: ModelSpec, source: SchemaSource, topic: str, part: Part, *, budget: protobuf.Budget, limits: Limits
    ) -> None:
        self._format: SchemaFormat = _schema_format(spec)
        self._budget = budget
        self._limits = limits
        if spec.schema_id is not None:
            raise SchemaError("an inline catalog's schemas have no ids: name a subject or the topic strategy")
        subject = spec.subject or (topic_subject(topic, part) if spec.strategy == "topic" else None)
        if subject is None:
            raise SchemaError("name the schema: a subject, or the topic strategy")
        self._subject, self._version, self._record = subject, spec.version, spec.record
        self._source = source
        self._read = _READS[self._format]

    def decode(self, raw: bytes | None) -> bytes | None:
        if raw is None:
            return None
        self._limits.check_size(raw)
        schema = self._source.by_subject(self._subject, self._version)
        if schema.format != self._format:
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"{self._subject} is {schema.format}, not {self._format}")
        payload = memoryview(raw)
        if self._format == "protobuf":
            value = _read_protobuf(schema, (), payload, self._limits, record=self._record, budget=self._budget)
            return dumps(value, self._limits)
        return dumps(self._read(schema, (), payload, self._limits), self._limits)


def _schema_format(spec: ModelSpec) -> SchemaFormat:
    if spec.model not in ("avro", "protobuf", "json"):
        raise SchemaError(f"the {spec.model} model takes no catalog")
    model: SchemaFormat = spec.model
    return model


def _compiled(make: Callable[[], _T]) -> _T:
    """A schema the catalog gives that does not compile is the records' problem, not the model's: counted."""
    try:
        return make()
    except SchemaError as exc:
        raise DecodeError(Reason.SCHEMA_MISMATCH, str(exc)) from None


def _read_avro(schema: Schema, imports: tuple[tuple[str, Schema], ...], payload: memoryview, limits: Limits) -> Any:
    texts = tuple(imported.text for _, imported in imports)
    return _compiled(lambda: avro.reader(schema.text, texts)).read(payload, limits)


def _read_json(schema: Schema, imports: tuple[tuple[str, Schema], ...], payload: memoryview, limits: Limits) -> Any:
    texts = tuple((name, imported.text) for name, imported in imports)
    checker = _compiled(lambda: json_values.checker(schema.text, texts))
    value = json_values.parse(payload, limits)
    checker.check(value)
    return value


def _read_protobuf(
    schema: Schema,
    imports: tuple[tuple[str, Schema], ...],
    payload: memoryview,
    limits: Limits,
    *,
    indexes: tuple[int, ...] | None = None,
    record: str | None = None,
    budget: protobuf.Budget = protobuf.DEFAULT_BUDGET,
) -> Any:
    del limits  # protobuf's parser stops at 100 levels by itself; `dumps` measures the JSON it gives
    texts = tuple((name, imported.text) for name, imported in imports)
    reader = _compiled(lambda: protobuf.reader(schema.text, texts, budget))
    descriptor = reader.by_indexes(indexes) if indexes is not None else reader.by_name(record)
    return reader.read(descriptor, payload)


_READS: dict[SchemaFormat, Read] = {"avro": _read_avro, "json": _read_json, "protobuf": _read_protobuf}


def decoder_for(
    spec: ModelSpec, catalogs: Catalogs, topic: str, part: Part = "value", limits: Limits = _LIMITS
) -> Decoder:
    """The decoder of `topic`'s `part` under `spec`; `SchemaError` for a model that cannot work (an `avro` model
    without a catalog, an inline catalog without a subject, an unknown catalog or character set)."""
    if spec.model == "string":
        return _Plain(scalars.string(spec.encoding), limits)
    if spec.model in ("int32", "int64", "float", "double"):
        return _Plain(scalars.number(spec.model), limits)
    if spec.catalog is None:
        if spec.model == "json":
            return _Plain(lambda raw: dumps(json_values.parse(raw, limits), limits), limits)
        raise SchemaError(f"the {spec.model} model needs a catalog")
    source = catalogs.source(spec.catalog)
    catalog = catalogs.specs[spec.catalog]
    budget = protobuf.Budget(catalog.protoc_timeout_s, catalog.protoc_max_bytes)
    if catalog.is_registry:
        return _Framed(spec, source, topic, part, budget=budget, limits=limits)
    return _Inline(spec, source, topic, part, budget=budget, limits=limits)
