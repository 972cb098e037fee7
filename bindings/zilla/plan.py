"""Reading a zilla.yaml: the plan's shapes, the checks of the file's shape, and the planning of endpoints and
routes, with every problem keyed by where it is in the file (bindings/zilla/document.py parses, plans and writes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bindings.documents.importing import Errors, ImportProblems
from bindings.models import (
    DEFAULT_RETRY_MS,
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
)
from bindings.shapes import unknown_keys

KAFKA_EXIT = "kafka_cache_client"
MAX_NAME = 100  # the models' SlugField length
MAX_VALUES = 100_000

_TOP_KEYS = frozenset({"name", "bindings", "guards", "vaults", "catalogs", "telemetry"})
_SSE_KEYS = frozenset({"type", "kind", "options", "routes", "exit"})
_SSE_OPTIONS = frozenset({"retry", "requests", "keepalive", "cors", "endpoint"})
_CORS_KEYS = frozenset({"origins", "credentials"})
_SSE_ROUTE_KEYS = frozenset({"when", "exit", "guarded"})
_PROXY_KEYS = frozenset({"type", "kind", "routes", "exit"})
_ROUTE_KEYS = frozenset({"name", "position", "when", "exit", "guarded", "with"})
_WITH_KEYS = frozenset({"topic", "filters", "event", "start", "caught_up", "slow_client", "fields", "conflate_ms"})
_GUARD_KEYS = frozenset({"type", "options"})
_JWT_OPTIONS = frozenset({"issuer", "audience", "keys", "roles", "identity", "attributes", "challenge", "cookie"})
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")


class ZillaConfigError(ImportProblems):
    """A zilla.yaml that cannot be imported: `errors` maps where in the file (dotted) to what is wrong there."""


# --- reading the file ---------------------------------------------------------------------------------------


@dataclass
class _EndpointPlan:
    where: str
    name: str
    retry_ms: Any
    keepalive_s: Any = None  # None: keep the current value (Zilla has no such option)
    cors: Any = None
    guarded: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _GuardPlan:
    where: str
    name: str
    fields: dict[str, Any]


@dataclass
class _RoutePlan:
    where: str
    name: str
    fields: dict[str, Any]


@dataclass
class _NamedPlan:
    """A catalog (by name) or a topic model (by topic): the service's arguments, and where in the file."""

    where: str
    name: str
    fields: dict[str, Any]


@dataclass
class _Plan:
    endpoints: list[_EndpointPlan] = field(default_factory=list)
    guards: list[_GuardPlan] = field(default_factory=list)
    routes: list[_RoutePlan] = field(default_factory=list)
    catalogs: list[_NamedPlan] = field(default_factory=list)
    topic_models: list[_NamedPlan] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    errors: Errors = field(default_factory=dict)

    def error(self, where: str, message: str) -> None:
        self.errors.setdefault(where, []).append(message)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower().replace("_", "-")).strip("-")[:MAX_NAME] or "zilla"


def _unknown(plan: _Plan, where: str, given: Mapping[Any, Any], allowed: frozenset[str]) -> None:
    """Each key of `given` that `allowed` lacks, refused under its own place (`<where>.<key>`) as the API refuses
    an unknown field."""
    for key, messages in unknown_keys(given, sorted(allowed)).items():
        for message in messages:
            plan.error(f"{where}.{key}" if where else key, message)


def _int(plan: _Plan, where: str, value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        plan.error(where, f"A whole number of 0 or more, not {value!r}.")
        return None
    return int(value)


def _strings(plan: _Plan, where: str, value: Any, what: str) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        plan.error(where, f"{what} are a list of strings.")
        return None
    return list(value)


def _guarded(plan: _Plan, where: str, value: Any) -> dict[str, list[str]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        plan.error(where, "`guarded` maps a guard's name to the roles a token needs, e.g. {jwt: [read]}.")
        return {}
    found = {}
    for guard, roles in value.items():
        checked = _strings(plan, f"{where}.{guard}", roles if roles is not None else [], "Roles")
        if checked is not None:
            found[str(guard)] = checked
    return found


def _plan_endpoints(plan: _Plan, bindings: Mapping[str, Any]) -> dict[str, _EndpointPlan]:
    """An endpoint per sse server binding that exits to an sse-kafka binding; sse-kafka binding -> endpoint."""
    proxies = {
        str(name)
        for name, b in bindings.items()
        if isinstance(b, Mapping) and b.get("type") == "sse-kafka" and b.get("kind") == "proxy"
    }
    served: dict[str, _EndpointPlan] = {}
    for binding_name, binding in bindings.items():
        if not isinstance(binding, Mapping) or binding.get("type") != "sse":
            continue
        where = f"bindings.{binding_name}"
        if binding.get("kind") != "server":
            plan.ignored.append(f"binding {binding_name} (sse {binding.get('kind')}): ignored, not an SSE server")
            continue
        _unknown(plan, where, binding, _SSE_KEYS)
        routes = binding.get("routes") or []
        if not isinstance(routes, list):
            plan.error(f"{where}.routes", "Routes are a list.")
            routes = []
        exits: list[tuple[Any, dict[str, list[str]]]] = [(binding.get("exit"), {})]
        for index, route in enumerate(routes):
            route_where = f"{where}.routes[{index}]"
            if not isinstance(route, Mapping):
                plan.error(route_where, "A route is a mapping with when, exit and guarded.")
                continue
            _unknown(plan, route_where, route, _SSE_ROUTE_KEYS)
            if route.get("when"):
                plan.ignored.append(
                    f"binding {binding_name}, route {index}: its `when` is ignored, the sse-kafka routes' paths route"
                )
            exits.append((route.get("exit"), _guarded(plan, f"{route_where}.guarded", route.get("guarded"))))
        targets = [(target, guarded) for target, guarded in exits if isinstance(target, str) and target in proxies]
        if not targets:
            plan.ignored.append(f"binding {binding_name} (sse): ignored, its exit is not an sse-kafka binding")
            continue
        endpoint = _plan_endpoint(plan, str(binding_name), binding.get("options"))
        for target, guarded in targets:
            if target in served and served[target] is not endpoint:
                plan.error(
                    f"bindings.{target}",
                    f"Both {served[target].where.split('.', 1)[1]} and {binding_name} exit to it: here an "
                    "sse-kafka binding's routes belong to one sse server.",
                )
                continue
            served[target] = endpoint
            for guard, roles in guarded.items():
                known = endpoint.guarded.setdefault(guard, [])
                known.extend(role for role in roles if role not in known)
        plan.endpoints.append(endpoint)
    return served


def _plan_endpoint(plan: _Plan, binding_name: str, options: Any) -> _EndpointPlan:
    where = f"bindings.{binding_name}"
    endpoint = _EndpointPlan(where=where, name=slug(binding_name), retry_ms=DEFAULT_RETRY_MS)
    if options is None:
        return endpoint
    if not isinstance(options, Mapping):
        plan.error(f"{where}.options", "Options are a mapping.")
        return endpoint
    _unknown(plan, f"{where}.options", options, _SSE_OPTIONS)
    if "retry" in options:
        endpoint.retry_ms = _int(plan, f"{where}.options.retry", options["retry"])
    if "keepalive" in options:
        endpoint.keepalive_s = _int(plan, f"{where}.options.keepalive", options["keepalive"])
    if "endpoint" in options:
        name = options["endpoint"]
        if not isinstance(name, str) or not _SLUG.fullmatch(name) or len(name) > MAX_NAME:
            plan.error(f"{where}.options.endpoint", "An endpoint's name has letters, digits, '_' and '-'.")
        else:
            endpoint.name = name
    if options.get("requests"):
        plan.ignored.append(f"binding {binding_name}: options.requests ignored, events are not validated by models")
    cors = options.get("cors")
    if cors is not None:
        if not isinstance(cors, Mapping):
            plan.error(f"{where}.options.cors", "CORS is a mapping with origins (a list) and credentials (true/false).")
        else:
            _unknown(plan, f"{where}.options.cors", cors, _CORS_KEYS)
            origins = _strings(plan, f"{where}.options.cors.origins", cors.get("origins", []), "Origins")
            credentials = cors.get("credentials", False)
            if not isinstance(credentials, bool):
                plan.error(f"{where}.options.cors.credentials", "Credentials is true or false.")
            endpoint.cors = (origins or [], credentials is True)
    return endpoint


def _plan_proxy(plan: _Plan, binding_name: str, binding: Mapping[str, Any], endpoint: _EndpointPlan | None) -> None:
    where = f"bindings.{binding_name}"
    if binding.get("kind") != "proxy":
        plan.error(f"{where}.kind", "An sse-kafka binding is of kind proxy.")
        return
    _unknown(plan, where, binding, _PROXY_KEYS)
    routes = binding.get("routes") or []
    if not isinstance(routes, list):
        plan.error(f"{where}.routes", "Routes are a list.")
        return
    for index, route in enumerate(routes):
        route_where = f"{where}.routes[{index}]"
        fields = _plan_route(plan, route_where, route)
        if fields is None:
            continue
        if endpoint is not None:
            fields["endpoint"] = endpoint.name
            for guard, roles in endpoint.guarded.items():
                known = fields["guarded"].setdefault(guard, [])
                known.extend(role for role in roles if role not in known)
        name = fields.pop("name", None) or f"{slug(binding_name)}-{index}"[:MAX_NAME]
        fields.setdefault("position", len(plan.routes))
        plan.routes.append(_RoutePlan(where=route_where, name=name, fields=fields))


def _plan_route(plan: _Plan, where: str, route: Any) -> dict[str, Any] | None:
    """`do_put_route` arguments for one sse-kafka route (extensions left out when absent), or None."""
    if not isinstance(route, Mapping):
        plan.error(where, "A route is a mapping with when, guarded and with.")
        return None
    _unknown(plan, where, route, _ROUTE_KEYS)
    fields: dict[str, Any] = {"guarded": _guarded(plan, f"{where}.guarded", route.get("guarded"))}
    if "name" in route:
        name = route["name"]
        if not isinstance(name, str) or not _SLUG.fullmatch(name) or len(name) > MAX_NAME:
            plan.error(f"{where}.name", "A route's name has letters, digits, '_' and '-'.")
        else:
            fields["name"] = name
    if "position" in route and (position := _int(plan, f"{where}.position", route["position"])) is not None:
        fields["position"] = position
    when = route.get("when")
    if not isinstance(when, list) or not when:
        plan.error(f"{where}.when", "Give the route `when` paths: without them it would match every path.")
        return None
    paths = []
    for index, condition in enumerate(when):
        if not isinstance(condition, Mapping) or not isinstance(condition.get("path"), str):
            plan.error(f"{where}.when[{index}].path", "A condition is {path: /pattern}.")
            continue
        _unknown(plan, f"{where}.when[{index}]", condition, frozenset({"path"}))
        paths.append(condition["path"])
    fields["paths"] = paths
    with_ = route.get("with")
    if not isinstance(with_, Mapping):
        plan.error(f"{where}.with.topic", "`with.topic` is required.")
        return None
    _unknown(plan, f"{where}.with", with_, _WITH_KEYS)
    if not isinstance(with_.get("topic"), str):
        plan.error(f"{where}.with.topic", "`with.topic` is required: a string.")
    fields["topic"] = with_.get("topic")
    event = with_.get("event") or {}
    if not isinstance(event, Mapping):
        plan.error(f"{where}.with.event", "`event` is a mapping with an id.")
        event = {}
    _unknown(plan, f"{where}.with.event", event, frozenset({"id"}))
    event_id = event.get("id") or EVENT_ID_ETAG
    if event_id not in (EVENT_ID_ETAG, EVENT_ID_KEY_AND_ETAG):
        plan.error(
            f"{where}.with.event.id", f"Either {EVENT_ID_ETAG!r} or {EVENT_ID_KEY_AND_ETAG!r}, not {event_id!r}."
        )
    fields["event_id"] = event_id
    filters = with_.get("filters") or []
    if not isinstance(filters, list):
        plan.error(f"{where}.with.filters", "Filters are a list.")
        filters = []
    fields["filters"] = filters  # their shape and content are checked by the service, errors mapped back
    _plan_extensions(plan, where, with_, fields)
    return fields


def _plan_extensions(plan: _Plan, where: str, with_: Mapping[str, Any], fields: dict[str, Any]) -> None:
    """Our extensions of a route's `with` into `fields`, with their types checked (values: by the service)."""
    for key in ("start", "caught_up", "slow_client", "fields", "conflate_ms"):
        if key in with_:
            fields[key] = with_[key]
    if "fields" in fields and not (
        isinstance(fields["fields"], list) and all(isinstance(item, str) for item in fields["fields"])
    ):
        plan.error(f"{where}.with.fields", "fields is a list of JSON Pointers, e.g. [/price, /item/name].")
    conflate = fields.get("conflate_ms", 0)
    if isinstance(conflate, bool) or not isinstance(conflate, int):
        plan.error(f"{where}.with.conflate_ms", "conflate_ms is a whole number of milliseconds.")
    if "caught_up" in fields and not isinstance(fields["caught_up"], bool):
        plan.error(f"{where}.with.caught_up", "caught_up is true or false.")
