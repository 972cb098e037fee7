"""What a topic's records are and where their schemas live: the plain, picklable spec the decoders are built from.

The shapes follow Zilla's `catalogs` and the kafka binding's topic `key`/`value` models, field for field, so the
control plane can mirror them in its models and its `zilla.yaml` import, and hand them to the fetch processes
(which import no Django) as they are. Every type here is a frozen dataclass of strings, numbers and tuples.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

CatalogKind = Literal["inline", "schema-registry", "karapace", "apicurio"]
SchemaFormat = Literal["avro", "protobuf", "json"]
Model = Literal["avro", "protobuf", "json", "string", "int32", "int64", "float", "double"]
Part = Literal["key", "value"]

CATALOG_KINDS: tuple[CatalogKind, ...] = get_args(CatalogKind)
SCHEMA_FORMATS: tuple[SchemaFormat, ...] = get_args(SchemaFormat)
MODELS: tuple[Model, ...] = get_args(Model)
# karapace and apicurio are Confluent-compatible registries: the same client serves all three kinds.
REGISTRY_KINDS: frozenset[CatalogKind] = frozenset({"schema-registry", "karapace", "apicurio"})

DEFAULT_MAX_AGE_S = 300  # Zilla's schema-registry catalog default `max-age`
# The bounds of a registry catalog's client and of protoc, as config/settings/streams.py defaults them
# (SSE_REGISTRY_*, SSE_PROTOC_*): the control plane fills them in from the settings.
DEFAULT_CACHE_ENTRIES = 1000
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
DEFAULT_LOOKUPS_PER_S = 20
DEFAULT_GIVE_UP_S = 60
DEFAULT_PROTOC_TIMEOUT_S = 10
DEFAULT_PROTOC_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class InlineSchema:
    """One version of a subject in an inline catalog; `subject` may hold `*` wildcards."""

    subject: str
    version: int
    format: SchemaFormat
    text: str


@dataclass(frozen=True)
class CatalogSpec:
    """A named catalog: inline schemas, or a Confluent-compatible registry at `url`.

    `auth` is the whole `Authorization` header value sent to the registry (`Basic …`, `Bearer …`); `max_age_s` is
    how long an answer of the registry is used before it is asked again. The other numbers bound what decoding
    with the catalog costs a process (docs/schemas.md): its registry client's cache (`cache_entries`,
    `cache_bytes`), its requests (`lookups_per_s`), how long a lookup that keeps being refused is waited for
    (`give_up_s`), and a `.proto`'s compilation (`protoc_timeout_s`, `protoc_max_bytes`).
    """

    name: str
    kind: CatalogKind
    url: str | None = None
    auth: str | None = None
    max_age_s: int = DEFAULT_MAX_AGE_S
    schemas: tuple[InlineSchema, ...] = ()
    cache_entries: int = DEFAULT_CACHE_ENTRIES
    cache_bytes: int = DEFAULT_CACHE_BYTES
    lookups_per_s: int = DEFAULT_LOOKUPS_PER_S
    give_up_s: int = DEFAULT_GIVE_UP_S
    protoc_timeout_s: int = DEFAULT_PROTOC_TIMEOUT_S
    protoc_max_bytes: int = DEFAULT_PROTOC_MAX_BYTES

    @property
    def is_registry(self) -> bool:
        return self.kind in REGISTRY_KINDS

    def __repr__(self) -> str:  # the auth header is a credential: never in a log line
        auth = "<hidden>" if self.auth else None
        url = redacted(self.url) if self.url else None
        return (
            f"CatalogSpec(name={self.name!r}, kind={self.kind!r}, url={url!r}, auth={auth!r}, "
            f"max_age_s={self.max_age_s!r}, schemas=<{len(self.schemas)}>)"
        )


def redacted(url: str) -> str:
    """`url` with its user info, if any, replaced by `***` (`https://***@host/...`): what a message may show. The
    control plane refuses such URLs; one saved before it did must not show its password in a log line."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class ModelSpec:
    """How one part (key or value) of a topic's records is encoded, and which schema describes it.

    The schema is chosen by `strategy="topic"` (subject `<topic>-key` / `<topic>-value`), by `schema_id`, or by
    `subject`, each with `version` (`"latest"` or a number). `record` names the Protobuf message of an inline
    catalog's schema; `encoding` is the character set of the `string` model (a Python codec name).
    """

    model: Model
    catalog: str | None = None
    strategy: Literal["topic"] | None = None
    schema_id: int | None = None
    subject: str | None = None
    version: Literal["latest"] | int = "latest"
    record: str | None = None
    encoding: str = "utf_8"


@dataclass(frozen=True)
class TopicModels:
    """The key and value models of the topics whose names match `topic_pattern` (`*` matches any characters)."""

    topic_pattern: str
    key: ModelSpec | None = None
    value: ModelSpec | None = None


@lru_cache(maxsize=1024)
def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(piece) for piece in pattern.split("*")), re.DOTALL)


def matches(pattern: str, name: str) -> bool:
    """Whether `name` matches `pattern`, where `*` stands for any run of characters, none included."""
    return pattern == name if "*" not in pattern else _wildcard(pattern).fullmatch(name) is not None


def models_for(topic: str, rules: Iterable[TopicModels]) -> TopicModels | None:
    """The models of `topic`: the rule naming it exactly, else the first whose pattern matches it."""
    candidates = list(rules)
    for rule in candidates:
        if rule.topic_pattern == topic:
            return rule
    return next((rule for rule in candidates if matches(rule.topic_pattern, topic)), None)


def topic_subject(topic: str, part: Part) -> str:
    """The subject of the `topic` strategy (Confluent's TopicNameStrategy): `<topic>-key` or `<topic>-value`."""
    return f"{topic}-{part}"
