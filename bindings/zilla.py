"""zilla.yaml import and export of the SSE configuration: Zilla's `sse` server and `sse-kafka` proxy bindings.

Import reads every `sse-kafka` proxy binding of a zilla.yaml: each route becomes a route here, named
`<binding>-<index>`, with its paths, topic, key and header filters and event-id format; the `sse` server
binding whose exit is that proxy becomes an endpoint (its `options.retry`). Nothing is written unless the whole
file is valid; every problem is reported with the binding and route it is in.

Export writes the routes back as those two kinds of binding, Zilla's schema only, and lists what it had to
leave out (our extensions: live start, caught-up, slow-client policy, value filters, keep-alive, CORS). The
kafka, http and tcp bindings that surround them belong to a deployment and are not written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from bindings.models import (
    DEFAULT_ENDPOINT,
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Route,
    routes_in_order,
)
from bindings.services import do_put_endpoint, do_put_route

KAFKA_EXIT = "kafka_cache_client"
_ROUTE_KEYS = frozenset({"when", "exit", "guarded", "with"})
_WITH_KEYS = frozenset({"topic", "filters", "event"})
_FILTER_KEYS = frozenset({"key", "headers"})


class ZillaConfigError(ValueError):
    """A zilla.yaml that cannot be imported; `problems` lists every reason, each naming where it is."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class ImportPlan:
    endpoints: dict[str, int] = field(default_factory=dict)  # name -> retry ms
    routes: list[dict[str, Any]] = field(default_factory=list)  # do_put_route keyword arguments
    problems: list[str] = field(default_factory=list)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower().replace("_", "-")).strip("-") or "zilla"


def parse(text: str) -> Mapping[str, Any]:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ZillaConfigError([f"not valid YAML: {exc}"]) from None
    if not isinstance(config, Mapping) or not isinstance(config.get("bindings"), Mapping):
        raise ZillaConfigError(["a zilla.yaml is a mapping with a `bindings` mapping"])
    return config


def plan_import(config: Mapping[str, Any]) -> ImportPlan:
    """What importing `config` would write, and every problem found; pure, no database."""
    plan = ImportPlan()
    bindings: Mapping[str, Any] = config["bindings"]
    servers = _sse_servers(bindings)
    for binding_name, binding in bindings.items():
        if not isinstance(binding, Mapping) or binding.get("type") != "sse-kafka":
            continue
        where = f"binding {binding_name}"
        if binding.get("kind") != "proxy":
            plan.problems.append(f"{where}: an sse-kafka binding is of kind proxy")
            continue
        endpoint = DEFAULT_ENDPOINT
        server = servers.get(binding_name)
        if server is not None:
            endpoint = slug(server[0])
            plan.endpoints[endpoint] = server[1]
        routes = binding.get("routes") or []
        if not isinstance(routes, list):
            plan.problems.append(f"{where}: routes is a list")
            continue
        for index, route in enumerate(routes):
            found = _route(route, f"{where}, route {index}", plan.problems)
            if found is not None:
                plan.routes.append({"name": f"{slug(binding_name)}-{index}", "endpoint": endpoint, **found})
    if not plan.routes and not plan.problems:
        plan.problems.append("no sse-kafka proxy binding with routes in this file")
    return plan


def _sse_servers(bindings: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """sse-kafka binding name -> (the sse server binding that exits to it, its retry)."""
    found: dict[str, tuple[str, int]] = {}
    for name, binding in bindings.items():
        if not isinstance(binding, Mapping) or binding.get("type") != "sse" or binding.get("kind") != "server":
            continue
        retry = (binding.get("options") or {}).get("retry", 2000)
        exits = [binding.get("exit")] + [r.get("exit") for r in binding.get("routes") or [] if isinstance(r, Mapping)]
        for target in exits:
            if isinstance(target, str) and isinstance(retry, int):
                found[target] = (name, retry)
    return found


def _route(route: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    if not isinstance(route, Mapping):
        problems.append(f"{where}: a route is a mapping")
        return None
    unknown = sorted(set(route) - _ROUTE_KEYS)
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(unknown)}")
    if route.get("guarded"):
        problems.append(f"{where}: guarded routes need JWT guards, which are not supported yet")
    paths = [when.get("path") for when in route.get("when") or [] if isinstance(when, Mapping)]
    if not paths or not all(isinstance(path, str) for path in paths):
        problems.append(f"{where}: give it `when` paths (a route without them would match every path)")
    with_ = route.get("with")
    if not isinstance(with_, Mapping) or not isinstance(with_.get("topic"), str):
        problems.append(f"{where}: `with.topic` is required")
        return None
    unknown = sorted(set(with_) - _WITH_KEYS)
    if unknown:
        problems.append(f"{where}: unknown keys in with: {', '.join(unknown)}")
    event_id = ((with_.get("event") or {}).get("id")) or EVENT_ID_ETAG
    if event_id not in (EVENT_ID_ETAG, EVENT_ID_KEY_AND_ETAG):
        problems.append(f"{where}: event.id is {EVENT_ID_ETAG!r} or {EVENT_ID_KEY_AND_ETAG!r}, not {event_id!r}")
    filters = []
    for number, spec in enumerate(with_.get("filters") or []):
        if not isinstance(spec, Mapping) or set(spec) - _FILTER_KEYS:
            problems.append(f"{where}, filter {number}: a filter has a key and/or headers")
            continue
        filters.append({"key": spec.get("key"), "headers": dict(spec.get("headers") or {})})
    return {"paths": paths, "topic": with_["topic"], "filters": filters, "event_id": event_id}


@transaction.atomic
def do_import_zilla(text: str) -> list[Route]:
    """Create or replace the routes (and endpoints) a zilla.yaml describes; all of it or nothing."""
    plan = plan_import(parse(text))
    if plan.problems:
        raise ZillaConfigError(plan.problems)
    problems: list[str] = []
    routes = []
    for name, retry in plan.endpoints.items():
        existing = Endpoint.objects.filter(name=name).first()
        keepalive = existing.keepalive_s if existing else 15
        do_put_endpoint(name=name, retry_ms=retry, keepalive_s=keepalive)
    for position, spec in enumerate(plan.routes):
        try:
            routes.append(do_put_route(position=position, **spec))
        except ValidationError as exc:
            for field_name, messages in exc.message_dict.items():
                problems.extend(f"route {spec['name']}, {field_name}: {message}" for message in messages)
    if problems:
        raise ZillaConfigError(problems)  # rolls the transaction back: nothing was written
    return routes


def export_zilla(name: str = "sse-platform") -> tuple[str, list[str]]:
    """The routes as a zilla.yaml (sse and sse-kafka bindings), and what Zilla's schema could not carry."""
    left_out: list[str] = []
    bindings: dict[str, Any] = {}
    for route in routes_in_order():
        endpoint = route.endpoint
        server, proxy = f"{endpoint.name}_sse_server".replace("-", "_"), f"{endpoint.name}_sse_kafka".replace("-", "_")
        if server not in bindings:
            bindings[server] = {"type": "sse", "kind": "server", "options": {"retry": endpoint.retry_ms}, "exit": proxy}
            bindings[proxy] = {"type": "sse-kafka", "kind": "proxy", "routes": []}
            if endpoint.keepalive_s != 15 or endpoint.cors_origins:  # noqa: PLR2004
                left_out.append(f"endpoint {endpoint.name}: keep-alive and CORS (Zilla sets them elsewhere)")
        with_: dict[str, Any] = {"topic": route.topic}
        filters = []
        for route_filter in route.filters.all():
            item: dict[str, Any] = {}
            if route_filter.key is not None:
                item["key"] = route_filter.key
            if route_filter.headers:
                item["headers"] = dict(route_filter.headers)
            if route_filter.value_path:
                left_out.append(f"route {route.name}: the value filter on {route_filter.value_path}")
            if item:
                filters.append(item)
        if filters:
            with_["filters"] = filters
        if route.event_id != EVENT_ID_ETAG:
            with_["event"] = {"id": route.event_id}
        for what, default, label in (
            (route.start, START_HISTORICAL, "start"),
            (route.slow_client, SLOW_CLIENT_CLOSE, "slow_client"),
            (route.caught_up, False, "caught_up"),
        ):
            if what != default:
                left_out.append(f"route {route.name}: {label}={what}")
        paths = [{"path": condition.path} for condition in route.conditions.all()]
        bindings[proxy]["routes"].append({"when": paths, "exit": KAFKA_EXIT, "with": with_})
    text = yaml.safe_dump({"name": name, "bindings": bindings}, sort_keys=False, allow_unicode=True)
    return text, left_out
