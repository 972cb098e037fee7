"""Writing the configuration as a zilla.yaml (bindings/zilla/document.py imports one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bindings.documents import yaml_io
from bindings.models import (
    DEFAULT_IDENTITY_CLAIM,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_ROLES_CLAIM,
    EVENT_ID_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Guard,
    Route,
    routes_in_order,
)
from bindings.zilla.catalogs import export_catalogs, export_topics, topic_models
from bindings.zilla.plan import KAFKA_EXIT, slug

# --- export -------------------------------------------------------------------------------------------------


def export_zilla(name: str = "sse-platform", *, strict: bool = False) -> tuple[str, list[str]]:
    """The configuration as a zilla.yaml: catalogs, guards, per endpoint an `sse` server and an `sse-kafka` proxy,
    and the `kafka` binding the routes exit to, whose `options.topics` carry the topic models.

    By default our extensions are written too (route names and positions, start, caught-up, slow-client, fields,
    conflation, value and expression filters, keep-alive, CORS, cookies), so the file imports back to the same
    configuration;
    the notes list them, since Zilla itself refuses them. `strict` writes Zilla's schema only and notes what it left
    out.
    """
    notes: list[str] = []

    def extension(what: str) -> bool:
        notes.append(f"{what} (not in Zilla's schema)" if not strict else f"left out: {what}")
        return not strict

    guards: dict[str, Any] = {}
    for guard in Guard.objects.order_by("name"):
        options: dict[str, Any] = {"issuer": guard.issuer, "audience": guard.audience}
        options["keys"] = guard.jwks_url or list(guard.keys)
        if guard.roles_claim != DEFAULT_ROLES_CLAIM:
            options["roles"] = guard.roles_claim
        if guard.identity_claim != DEFAULT_IDENTITY_CLAIM:
            options["identity"] = guard.identity_claim
        if guard.attributes:
            options["attributes"] = dict(guard.attributes)
        if guard.challenge_s:
            options["challenge"] = guard.challenge_s
        if guard.cookie and extension(f"guard {guard.name}: cookie {guard.cookie}"):
            options["cookie"] = guard.cookie
        if guard.allow_tokens_without_exp:
            # Not even as an extension: an import keeps the default and refuses them, the safe way to be wrong.
            notes.append(f"left out: guard {guard.name} accepts tokens without exp (an import refuses them)")
        guards[guard.name] = {"type": "jwt", "options": options}

    bindings: dict[str, Any] = {}
    proxies: dict[str, list[dict[str, Any]]] = {}
    for endpoint in Endpoint.objects.order_by("name"):
        proxy = f"{endpoint.name}_sse_kafka"
        options = {"retry": endpoint.retry_ms}
        if endpoint.keepalive_s != DEFAULT_KEEPALIVE_S and extension(
            f"endpoint {endpoint.name}: keepalive {endpoint.keepalive_s}"
        ):
            options["keepalive"] = endpoint.keepalive_s
        if (endpoint.cors_origins or endpoint.cors_credentials) and extension(f"endpoint {endpoint.name}: cors"):
            options["cors"] = {"origins": list(endpoint.cors_origins), "credentials": endpoint.cors_credentials}
        if slug(endpoint.name) != endpoint.name and not strict:
            options["endpoint"] = endpoint.name
        bindings[endpoint.name] = {"type": "sse", "kind": "server", "options": options, "exit": proxy}
        bindings[proxy] = {"type": "sse-kafka", "kind": "proxy", "routes": proxies.setdefault(endpoint.name, [])}

    # An import positions a route by its place in the file, where routes are grouped by endpoint: a route whose
    # position differs from that place carries it.
    order = {endpoint_name: index for index, endpoint_name in enumerate(proxies)}
    in_file = sorted(routes_in_order(), key=lambda route: order[route.endpoint.name])
    for index, route in enumerate(in_file):
        proxies[route.endpoint.name].append(_export_route(route, index, strict, extension))
    if in_file and not strict:
        notes.append("routes: `name` and `position` keep each route's name and place on import (not in Zilla's schema)")
    models = topic_models()
    topics = export_topics(models)
    if topics:  # the kafka binding the routes exit to carries the topics' models
        bindings[KAFKA_EXIT] = {"type": "kafka", "kind": "cache_client", "options": {"topics": topics}}
    config: dict[str, Any] = {"name": name}
    catalogs = export_catalogs(strict, notes, models)
    if catalogs:
        config["catalogs"] = catalogs
    if guards:
        config["guards"] = guards
    config["bindings"] = bindings
    return yaml_io.dump(config), notes


def _export_route(route: Route, index: int, strict: bool, extension: Callable[[str], bool]) -> dict[str, Any]:
    exported: dict[str, Any] = {}
    if not strict:
        exported["name"] = route.name
        if route.position != index:
            exported["position"] = route.position
    exported["when"] = [{"path": condition.path} for condition in route.conditions.all()]
    exported["exit"] = KAFKA_EXIT
    guarded = {route_guard.guard.name: list(route_guard.roles) for route_guard in route.guards.all()}
    if guarded:
        exported["guarded"] = guarded
    with_: dict[str, Any] = {"topic": route.topic}
    filters = []
    for route_filter in route.filters.all():
        item: dict[str, Any] = {}
        if route_filter.key is not None:
            item["key"] = route_filter.key
        if route_filter.headers:
            item["headers"] = dict(route_filter.header_items())
        if route_filter.value_path and extension(f"route {route.name}: the value filter on {route_filter.value_path}"):
            item["value"] = {"path": route_filter.value_path, "equals": route_filter.value_equals}
        if route_filter.expression and extension(
            f"route {route.name}: the expression filter {route_filter.expression!r}"
        ):
            item["expression"] = route_filter.expression
        if item:
            filters.append(item)
    if filters:
        with_["filters"] = filters
    if route.event_id != EVENT_ID_ETAG:
        with_["event"] = {"id": route.event_id}
    for key, value, default in (
        ("start", route.start, START_HISTORICAL),
        ("caught_up", route.caught_up, False),
        ("slow_client", route.slow_client, SLOW_CLIENT_CLOSE),
        ("conflate_ms", route.conflate_ms, 0),
    ):
        if value != default and extension(f"route {route.name}: {key}={value}"):
            with_[key] = value
    if route.fields and extension(f"route {route.name}: fields {', '.join(route.fields)}"):
        with_["fields"] = list(route.fields)
    exported["with"] = with_
    return exported
