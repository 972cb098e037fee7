"""Read functions for the data plane: frozen dataclasses, never ORM objects across the async boundary.

These dataclasses are the contract between the control plane and the data plane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from django.conf import settings
from django.utils import timezone

# The two `with.event.id` values Zilla accepts (they select an encoding, they are not templates) and the two
# start positions: the models define them as their choices, the data plane reads them here.
from bindings.models import (
    ASYMMETRIC_ALGORITHMS,
    DEFAULT_IDENTITY_CLAIM,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_RETRY_MS,
    DEFAULT_ROLES_CLAIM,
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    LATEST,
    SLOW_CLIENT_CLOSE,
    SLOW_CLIENT_CONFLATE,
    START_HISTORICAL,
    START_LIVE,
    Catalog,
    Endpoint,
    Guard,
    RouteFilter,
    TopicModel,
    routes_in_order,
)
from bindings.models.catalogs import topic_matches, topic_specificity
from bindings.models.configuration import MAX_CONFLATE_MS
from bindings.models.revocation import Revocation

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "EVENT_ID_ETAG",
    "EVENT_ID_KEY_AND_ETAG",
    "MAX_CONFLATE_MS",
    "SLOW_CLIENT_CLOSE",
    "SLOW_CLIENT_CONFLATE",
    "START_HISTORICAL",
    "START_LIVE",
    "CatalogSpec",
    "EndpointSpec",
    "FilterSpec",
    "GuardSpec",
    "InlineSchemaSpec",
    "ModelSpec",
    "RevocationSpec",
    "RouteSpec",
    "TopicModelsSpec",
    "ValueFilterSpec",
    "catalog_specs",
    "endpoint_spec",
    "filter_spec",
    "revocation_specs",
    "route_specs",
    "topic_model_specs",
    "topic_models_for",
]


@dataclass(frozen=True)
class EndpointSpec:
    """An SSE endpoint: settings shared by the routes it serves."""

    name: str = "default"
    retry_ms: int = DEFAULT_RETRY_MS
    keepalive_s: int = DEFAULT_KEEPALIVE_S
    cors_origins: tuple[str, ...] = ()  # exact origins, or "*"
    cors_credentials: bool = False
    max_streams_per_client: int | None = None  # None: the setting's
    max_streams_per_identity: int | None = None


@dataclass(frozen=True)
class ValueFilterSpec:
    """Match a JSON value whose field at dotted `path` equals `equals` (templated like keys)."""

    path: str
    equals: str


@dataclass(frozen=True)
class FilterSpec:
    """One filter: the key, every header, the value condition and the expression must all match. Templates
    unresolved; the expression (CEL, bindings/expressions.py) reads the request's params and grants as variables."""

    key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    value: ValueFilterSpec | None = None
    expression: str = ""


@dataclass(frozen=True)
class GuardSpec:
    """A JWT guard. `keys` is the JWKS list as JSON text (hashable, parsed once by the data plane)."""

    name: str
    issuer: str
    audience: str
    keys: str = "[]"
    jwks_url: str = ""
    roles_claim: str = DEFAULT_ROLES_CLAIM
    identity_claim: str = DEFAULT_IDENTITY_CLAIM
    attributes: tuple[tuple[str, str], ...] = ()
    challenge_s: int = 0
    cookie: str = ""
    allow_tokens_without_exp: bool = False

    def verification(self) -> tuple[object, ...]:
        """What decides which tokens the guard accepts and what it reads from them."""
        return (
            self.issuer, self.audience, self.keys, self.jwks_url, self.roles_claim, self.identity_claim,
            self.attributes, self.allow_tokens_without_exp,
        )  # fmt: skip


@dataclass(frozen=True)
class RouteSpec:
    name: str
    paths: tuple[str, ...]  # conditions: the route matches when any pattern matches
    topic: str  # may hold ${params.x}
    filters: tuple[FilterSpec, ...] = ()  # any filter matches; none = the whole topic
    event_id: str = EVENT_ID_ETAG
    start: str = START_HISTORICAL
    caught_up: bool = False  # send a `caught-up` event once replay reaches the live end
    slow_client: str = SLOW_CLIENT_CLOSE  # or SLOW_CLIENT_CONFLATE
    endpoint: EndpointSpec = field(default_factory=EndpointSpec)
    guarded: tuple[tuple[GuardSpec, tuple[str, ...]], ...] = ()  # every guard must authorise, with its roles
    fields: tuple[str, ...] = ()  # JSON Pointers: the parts of each value sent; none: all of it
    conflate_ms: int = 0  # at most one event per key per interval, the latest (0: every event)
    # `delivery()`, made once: every open stream of the route keeps it (streams/routes/table.py, `OpenStreams`).
    _delivery: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        guards = tuple((guard.name, guard.verification(), roles) for guard, roles in self.guarded)
        delivery = (
            self.topic, self.filters, self.event_id, self.start, self.caught_up, self.slow_client, guards, self.fields,
            self.conflate_ms,
        )  # fmt: skip
        object.__setattr__(self, "_delivery", delivery)  # a frozen dataclass's derived field

    def delivery(self) -> tuple[object, ...]:
        """What decides which events a stream of this route gets and who may have it: a stream opened under one
        value is closed when a change gives another. Not in it: the paths (a stream is closed only when its own
        path no longer matches), endpoint settings such as retry and CORS, and a guard's cookie and challenge
        lead, which apply to new streams."""
        return self._delivery


def endpoint_spec(endpoint: Endpoint) -> EndpointSpec:
    return EndpointSpec(
        name=endpoint.name,
        retry_ms=endpoint.retry_ms,
        keepalive_s=endpoint.keepalive_s,
        cors_origins=tuple(endpoint.cors_origins),
        cors_credentials=endpoint.cors_credentials,
        max_streams_per_client=endpoint.max_streams_per_client,
        max_streams_per_identity=endpoint.max_streams_per_identity,
    )


def guard_spec(guard: Guard) -> GuardSpec:
    return GuardSpec(
        name=guard.name,
        issuer=guard.issuer,
        audience=guard.audience,
        keys=json.dumps(guard.keys, sort_keys=True),
        jwks_url=guard.jwks_url,
        roles_claim=guard.roles_claim,
        identity_claim=guard.identity_claim,
        attributes=tuple(sorted(guard.attributes.items())),
        challenge_s=guard.challenge_s,
        cookie=guard.cookie,
        allow_tokens_without_exp=guard.allow_tokens_without_exp,
    )


def filter_spec(route_filter: RouteFilter) -> FilterSpec:
    value = None
    if route_filter.value_path:
        value = ValueFilterSpec(path=route_filter.value_path, equals=route_filter.value_equals)
    return FilterSpec(
        key=route_filter.key,
        headers=tuple(route_filter.header_items()),
        value=value,
        expression=route_filter.expression,
    )


def route_specs() -> tuple[RouteSpec, ...]:
    """Every route, in the order they are tried (four queries, whatever the number of routes)."""
    return tuple(
        RouteSpec(
            name=route.name,
            paths=tuple(condition.path for condition in route.conditions.all()),
            topic=route.topic,
            filters=tuple(filter_spec(route_filter) for route_filter in route.filters.all()),
            event_id=route.event_id,
            start=route.start,
            caught_up=route.caught_up,
            slow_client=route.slow_client,
            fields=tuple(route.fields),
            conflate_ms=route.conflate_ms,
            endpoint=endpoint_spec(route.endpoint),
            guarded=tuple(
                (guard_spec(route_guard.guard), tuple(route_guard.roles)) for route_guard in route.guards.all()
            ),
        )
        for route in routes_in_order()
    )


@dataclass(frozen=True)
class RevocationSpec:
    """Tokens of the guard named `guard` with this identity, or this `jti` (exactly one is set), are refused until
    `until` (epoch seconds)."""

    guard: str
    until: float
    identity: str | None = None
    jti: str | None = None


def revocation_specs() -> tuple[RevocationSpec, ...]:
    """The revocations that have not lapsed (one query); those that lapse later are the reader's to ignore."""
    found = Revocation.objects.filter(until__gt=timezone.now()).select_related("guard").order_by("id")
    return tuple(
        RevocationSpec(
            guard=revocation.guard.name,
            until=revocation.until.timestamp(),
            identity=revocation.identity or None,
            jti=revocation.jti or None,
        )
        for revocation in found
    )


CatalogKind = Literal["inline", "schema-registry", "karapace", "apicurio"]
SchemaFormat = Literal["avro", "protobuf", "json"]
ModelName = Literal["avro", "protobuf", "json", "string", "int32", "int64", "float", "double"]


@dataclass(frozen=True)
class InlineSchemaSpec:
    """One version of a subject's schema in an inline catalog; `subject` may hold `*` wildcards. An exact subject
    is read before a wildcard one, and of wildcards the most specific (as `TopicModelsSpec` patterns)."""

    subject: str
    version: int
    format: SchemaFormat
    text: str


@dataclass(frozen=True)
class CatalogSpec:
    """Where schemas come from. An inline catalog's `schemas` are every version kept; its records carry the plain
    encoding, no registry framing. A registry (`schema-registry`, `karapace`, `apicurio`: all read through the
    Confluent-compatible API at `url`) has no schemas here: they are read from it and cached `max_age_s` seconds,
    sending `auth` as the Authorization header when there is one. The other numbers bound what decoding with the
    catalog costs a process: the settings `SSE_REGISTRY_*` and `SSE_PROTOC_*` (config/settings/streams.py),
    defaulting as they do."""

    name: str
    kind: CatalogKind
    url: str | None
    auth: str | None
    max_age_s: int
    schemas: tuple[InlineSchemaSpec, ...] = ()
    cache_entries: int = 1000
    cache_bytes: int = 64 * 1024 * 1024
    lookups_per_s: int = 20
    give_up_s: int = 60
    protoc_timeout_s: int = 10
    protoc_max_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class ModelSpec:
    """How a key or a value is encoded. With a catalog, exactly one way chooses the schema: `strategy` "topic"
    (subject `<topic>-key` / `<topic>-value` at `version`), `schema_id`, or `subject` at `version`."""

    model: ModelName
    catalog: str | None = None
    strategy: Literal["topic"] | None = None
    schema_id: int | None = None
    subject: str | None = None
    version: Literal["latest"] | int = "latest"
    record: str | None = None  # protobuf: the message's full name
    encoding: str = "utf_8"  # string: a Python codec name


@dataclass(frozen=True)
class TopicModelsSpec:
    """The models of the topics `topic_pattern` covers: a Kafka topic name, `*` matching any run of characters
    (none included). None for a side: its bytes are passed through as they are."""

    topic_pattern: str
    key: ModelSpec | None = None
    value: ModelSpec | None = None


def catalog_specs() -> tuple[CatalogSpec, ...]:
    """Every catalog by name, with its inline schemas (two queries)."""
    return tuple(
        CatalogSpec(
            name=catalog.name,
            kind=catalog.kind,  # type: ignore[arg-type]  # the model's choices are these
            url=catalog.url or None,
            auth=catalog.auth or None,
            max_age_s=catalog.max_age_s,
            schemas=tuple(
                InlineSchemaSpec(subject=s.subject, version=s.version, format=s.format, text=s.text)  # type: ignore[arg-type]
                for s in sorted(catalog.schemas.all(), key=lambda s: (s.subject, s.version))
            ),
            cache_entries=settings.SSE_REGISTRY_CACHE_ENTRIES,
            cache_bytes=settings.SSE_REGISTRY_CACHE_BYTES,
            lookups_per_s=settings.SSE_REGISTRY_LOOKUPS_PER_S,
            give_up_s=settings.SSE_REGISTRY_GIVE_UP_S,
            protoc_timeout_s=settings.SSE_PROTOC_TIMEOUT_S,
            protoc_max_bytes=settings.SSE_PROTOC_MAX_BYTES,
        )
        for catalog in Catalog.objects.prefetch_related("schemas").order_by("name")
    )


def _model_spec(topic_model: TopicModel, side: str) -> ModelSpec | None:
    fields = topic_model.side(side)
    if not fields["model"]:
        return None
    strategy, version = fields["strategy"], fields["version"] or LATEST
    return ModelSpec(
        model=fields["model"],
        catalog=fields["catalog"].name if fields["catalog"] is not None else None,
        strategy="topic" if strategy == TopicModel.Strategy.TOPIC else None,
        schema_id=fields["schema_id"] if strategy == TopicModel.Strategy.ID else None,
        subject=fields["subject"] or None,
        version="latest" if version == LATEST else int(version),
        record=fields["record"] or None,
        encoding=fields["encoding"] or "utf_8",
    )


def topic_model_specs() -> tuple[TopicModelsSpec, ...]:
    """Every topic model, most specific first (`topic_models_for` takes the first that covers a topic): an exact
    topic name before any pattern, then the pattern with more characters besides `*`, then by text (one query)."""
    found = TopicModel.objects.select_related("key_catalog", "value_catalog")
    return tuple(
        TopicModelsSpec(topic_pattern=tm.topic, key=_model_spec(tm, "key"), value=_model_spec(tm, "value"))
        for tm in sorted(found, key=lambda tm: topic_specificity(tm.topic))
    )


def topic_models_for(specs: tuple[TopicModelsSpec, ...], topic: str) -> TopicModelsSpec | None:
    """The models of `topic`: the first of `specs` (as `topic_model_specs` orders them) that covers it."""
    return next((spec for spec in specs if topic_matches(spec.topic_pattern, topic)), None)
