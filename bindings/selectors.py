"""Read functions for the data plane: frozen dataclasses, never ORM objects across the async boundary.

These dataclasses are the contract between the control plane and the data plane.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bindings.models import Route

# The two `with.event.id` values Zilla accepts; they select an encoding, they are not templates.
EVENT_ID_ETAG = "${etag}"
EVENT_ID_KEY_AND_ETAG = '["${base64(key)}","${etag}"]'
START_HISTORICAL = "historical"
START_LIVE = "live"


@dataclass(frozen=True)
class EndpointSpec:
    """An SSE endpoint: settings shared by the routes it serves."""

    name: str = "default"
    retry_ms: int = 2000
    keepalive_s: int = 15
    cors_origins: tuple[str, ...] = ()  # exact origins, or "*"
    cors_credentials: bool = False


@dataclass(frozen=True)
class ValueFilterSpec:
    """Match a JSON value whose field at dotted `path` equals `equals` (templated like keys)."""

    path: str
    equals: str


@dataclass(frozen=True)
class FilterSpec:
    """One filter: the key, every header and the value condition must all match. Templates unresolved."""

    key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    value: ValueFilterSpec | None = None


@dataclass(frozen=True)
class RouteSpec:
    name: str
    paths: tuple[str, ...]  # conditions: the route matches when any pattern matches
    topic: str  # may hold ${params.x}
    filters: tuple[FilterSpec, ...] = ()  # any filter matches; none = the whole topic
    event_id: str = EVENT_ID_ETAG
    start: str = START_HISTORICAL
    caught_up: bool = False  # send a `caught-up` event once replay reaches the live end
    endpoint: EndpointSpec = field(default_factory=EndpointSpec)


def route_specs() -> tuple[RouteSpec, ...]:
    """Every route, in the order they are tried."""
    return tuple(
        RouteSpec(name=r.name, paths=(r.path,), topic=r.topic) for r in Route.objects.order_by("position", "id")
    )
