"""zilla.yaml import and export: endpoints, JWT guards and sse-kafka routes to and from Zilla's configuration.

Import reads a whole zilla.yaml:
- each `sse` server binding whose exit is an `sse-kafka` binding becomes an endpoint (named after the binding,
  slugged), with its `options.retry`; the `guarded` of its routes is added to every route behind it, so a file
  that guards the sse layer (Zilla's JWT examples) never imports as open streams;
- each route of an `sse-kafka` proxy binding becomes a route named `<binding>-<index>` (slugged), with its
  `when` paths, `guarded` roles, `with.topic`, `with.filters` and `with.event.id`; routes take positions in file
  order;
- each `guards:` entry of `type: jwt` becomes a guard: issuer, audience, keys (a JWK list, or a URL string: the
  JWKS URL; left out: `<issuer>/.well-known/jwks.json`, as Zilla), roles -> roles_claim, identity ->
  identity_claim, attributes, challenge -> challenge_s. Zilla's examples write RSA `n` in standard base64
  (`+ / =`); key material is rewritten as base64url, which is what JWKs are and what PyJWT expects.
Everything else (tcp, tls, http, kafka, filesystem bindings, other guard types, vaults, telemetry) is listed as
ignored in the result, never dropped silently.

Our extensions (docs/contract.md §7) ride in the same places, so an export imports back to the same
configuration: route
`name` and `position`, `with.start`, `with.caught_up`, `with.slow_client`, a filter's `value: {path, equals}`,
the sse binding's `options.keepalive` (seconds), `options.cors: {origins, credentials}` and `options.endpoint`
(the endpoint's name when the binding's name cannot be it), and a jwt guard's `options.cookie`. What Zilla
cannot say (keep-alive, CORS, the guard's cookie, a route's start, caught-up and slow-client policy) keeps its
current value when the file leaves it out, so importing a plain Zilla file never resets what was set here.

Every write goes through `bindings.services` in one transaction: all of it or nothing. Errors are keyed by
where they are in the file (`bindings.<binding>.routes[<i>].with.topic`, `guards.<guard>.options.keys`).
A dry run makes the same writes, reports them and rolls back, so it validates exactly as the import would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from bindings.models import (
    DEFAULT_KEEPALIVE_S,
    DEFAULT_RETRY_MS,
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Guard,
    Route,
    routes_in_order,
)
from bindings.patterns import GUARD_NAME
from bindings.representations import endpoint_representation, guard_representation
from bindings.services import (
    Actor,
    do_delete_route,
    do_put_endpoint,
    do_put_guard,
    do_put_route,
    route_state,
)

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
_WITH_KEYS = frozenset({"topic", "filters", "event", "start", "caught_up", "slow_client"})
_GUARD_KEYS = frozenset({"type", "options"})
_JWT_OPTIONS = frozenset({"issuer", "audience", "keys", "roles", "identity", "attributes", "challenge", "cookie"})
_KEY_MATERIAL = ("n", "e", "x", "y")
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")

# Where a service's error field lives in the file, by kind.
_ROUTE_FIELDS = {
    "topic": "with.topic",
    "paths": "when",
    "filters": "with.filters",
    "event_id": "with.event.id",
    "start": "with.start",
    "caught_up": "with.caught_up",
    "slow_client": "with.slow_client",
}
_GUARD_FIELDS = {
    "issuer": "options.issuer",
    "audience": "options.audience",
    "keys": "options.keys",
    "jwks_url": "options.keys",
    "roles_claim": "options.roles",
    "identity_claim": "options.identity",
    "attributes": "options.attributes",
    "challenge_s": "options.challenge",
    "cookie": "options.cookie",
}
_ENDPOINT_FIELDS = {
    "retry_ms": "options.retry",
    "keepalive_s": "options.keepalive",
    "cors_origins": "options.cors.origins",
    "cors_credentials": "options.cors.credentials",
    "name": "options.endpoint",
}

Errors = dict[str, list[str]]


class ZillaConfigError(ValueError):
    """A zilla.yaml that cannot be imported: `errors` maps where in the file (dotted) to what is wrong there."""

    def __init__(self, errors: Errors) -> None:
        self.errors = errors
        self.problems = [f"{where}: {message}" if where else message for where, ms in errors.items() for message in ms]
        super().__init__("; ".join(self.problems))


# --- the result ---------------------------------------------------------------------------------------------


@dataclass
class ObjectResult:
    """What an import did (or, in a dry run, would do) to one endpoint, guard or route."""

    kind: str
    name: str
    action: str  # created, updated, unchanged, deleted
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (before, after), for updates


@dataclass
class ImportResult:
    """The outcome the command prints and the API answers: one entry per object, and what the file held that
    is not imported."""

    dry_run: bool
    objects: list[ObjectResult] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def of(self, action: str) -> list[ObjectResult]:
        return [item for item in self.objects if item.action == action]

    def as_dict(self) -> dict[str, Any]:
        def entry(item: ObjectResult) -> dict[str, Any]:
            found: dict[str, Any] = {"kind": item.kind, "name": item.name}
            if item.action == "updated":
                found["changes"] = {name: {"before": b, "after": a} for name, (b, a) in item.changes.items()}
            return found

        actions = ("created", "updated", "unchanged", "deleted")
        return {
            "dry_run": self.dry_run,
            **{action: [entry(item) for item in self.of(action)] for action in actions},
            "ignored": list(self.ignored),
        }

    def lines(self) -> list[str]:
        """Human lines: one per object (updates with a line per changed field), then what was ignored."""
        out = []
        verbs = {"created": "create", "updated": "update", "unchanged": "unchanged", "deleted": "delete"}
        for item in self.objects:
            verb = verbs[item.action] if self.dry_run else item.action
            if self.dry_run and item.action != "unchanged":
                verb = f"would {verb}"
            out.append(f"{item.kind} {item.name}: {verb}")
            out.extend(f"    {name}: {b!r} -> {a!r}" for name, (b, a) in item.changes.items())
        out.extend(self.ignored)
        return out


def _diff(before: dict[str, Any] | None, after: dict[str, Any] | None, kind: str, name: str) -> ObjectResult:
    if before is None:
        return ObjectResult(kind, name, "created")
    if after is None:
        return ObjectResult(kind, name, "deleted")
    changes = {key: (before.get(key), after.get(key)) for key in after if before.get(key) != after.get(key)}
    return ObjectResult(kind, name, "updated" if changes else "unchanged", changes)


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
class _Plan:
    endpoints: list[_EndpointPlan] = field(default_factory=list)
    guards: list[_GuardPlan] = field(default_factory=list)
    routes: list[_RoutePlan] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    errors: Errors = field(default_factory=dict)

    def error(self, where: str, message: str) -> None:
        self.errors.setdefault(where, []).append(message)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower().replace("_", "-")).strip("-")[:MAX_NAME] or "zilla"


def parse(text: str) -> Mapping[str, Any]:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ZillaConfigError({"yaml": [f"Not valid YAML: {exc}"]}) from None
    if not isinstance(config, Mapping):
        raise ZillaConfigError({"yaml": ["A zilla.yaml is a mapping with `bindings` (and `guards`)."]})
    problem = _content_problem(config)
    if problem:
        raise ZillaConfigError({"yaml": [problem]})
    if config.get("bindings") is not None and not isinstance(config.get("bindings"), Mapping):
        raise ZillaConfigError({"bindings": ["`bindings` is a mapping of binding name -> binding."]})
    if config.get("guards") is not None and not isinstance(config.get("guards"), Mapping):
        raise ZillaConfigError({"guards": ["`guards` is a mapping of guard name -> guard."]})
    return config


def _content_problem(config: object) -> str | None:
    """Why the parsed file cannot be stored, or None: a NUL character (Postgres refuses it in text), or more
    values than any zilla.yaml has (YAML aliases can make a small file expand without bound)."""
    pending, seen = [config], 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_VALUES:
            return f"More than {MAX_VALUES} values (counting what aliases repeat): not a zilla.yaml to import."
        if isinstance(value, str) and "\x00" in value:
            return "A value holds a NUL character, which cannot be stored."
        if isinstance(value, Mapping):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return None


def _unknown(plan: _Plan, where: str, given: Mapping[Any, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(str(key) for key in given if key not in allowed)
    if unknown:
        plan.error(where, f"Unknown key {', '.join(unknown)}; known: {', '.join(sorted(allowed))}.")


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


def plan_import(config: Mapping[str, Any]) -> _Plan:
    """What importing `config` would write, what it ignores, and every problem of shape; no database."""
    plan = _Plan()
    _unknown(plan, "", config, _TOP_KEYS)
    for key in ("vaults", "catalogs", "telemetry"):
        if config.get(key):
            plan.ignored.append(f"{key}: ignored, the platform has its own")
    bindings: Mapping[str, Any] = config.get("bindings") or {}
    servers = _plan_endpoints(plan, bindings)
    for binding_name, binding in bindings.items():
        where = f"bindings.{binding_name}"
        if not isinstance(binding, Mapping):
            plan.error(where, "A binding is a mapping with a type and a kind.")
            continue
        kind = binding.get("type")
        if not isinstance(kind, str):
            plan.error(f"{where}.type", "A binding needs a type (sse, sse-kafka, http, tcp, ...).")
        elif kind == "sse-kafka":
            _plan_proxy(plan, str(binding_name), binding, servers.get(str(binding_name)))
        elif kind != "sse":
            plan.ignored.append(f"binding {binding_name} ({kind}): ignored, not an SSE binding")
    for guard_name, guard in (config.get("guards") or {}).items():
        _plan_guard(plan, str(guard_name), guard)
    if not (plan.routes or plan.endpoints or plan.guards or plan.errors):
        plan.error("bindings", "Nothing to import: no sse-kafka binding and no jwt guard in this file.")
    return plan


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
    for key in ("start", "caught_up", "slow_client"):
        if key in with_:
            fields[key] = with_[key]
    if "caught_up" in fields and not isinstance(fields["caught_up"], bool):
        plan.error(f"{where}.with.caught_up", "caught_up is true or false.")
    return fields


def _plan_guard(plan: _Plan, name: str, guard: Any) -> None:
    where = f"guards.{name}"
    if not isinstance(guard, Mapping):
        plan.error(where, "A guard is a mapping with a type and options.")
        return
    if not isinstance(guard.get("type"), str):
        plan.error(f"{where}.type", "A guard needs a type (jwt, ...).")
        return
    if guard.get("type") != "jwt":
        plan.ignored.append(f"guard {name} ({guard.get('type')}): ignored, only jwt guards are imported")
        return
    _unknown(plan, where, guard, _GUARD_KEYS)
    if not GUARD_NAME.fullmatch(name) or len(name) > MAX_NAME:
        plan.error(where, "A guard's name has letters, digits, '_' and '-'.")
        return
    options = guard.get("options")
    if not isinstance(options, Mapping):
        plan.error(f"{where}.options", "A jwt guard needs options: issuer, audience and keys.")
        return
    _unknown(plan, f"{where}.options", options, _JWT_OPTIONS)
    fields: dict[str, Any] = {}
    for key, target in (
        ("issuer", "issuer"),
        ("audience", "audience"),
        ("roles", "roles_claim"),
        ("identity", "identity_claim"),
        ("cookie", "cookie"),
    ):
        if key in options:
            if not isinstance(options[key], str):
                plan.error(f"{where}.options.{key}", f"`{key}` is a string.")
            else:
                fields[target] = options[key]
    for key in ("issuer", "audience"):
        if key not in options:
            plan.error(f"{where}.options.{key}", f"A jwt guard needs its {key}: without it Zilla refuses every token.")
    keys = options.get("keys")
    if keys is None:
        # Zilla's default: the issuer's well-known JWKS, without doubling a trailing slash.
        issuer = str(options.get("issuer", ""))
        fields["jwks_url"] = f"{issuer.rstrip('/')}/.well-known/jwks.json"
        fields["keys"] = []
    elif isinstance(keys, str):
        fields["jwks_url"], fields["keys"] = keys, []
    elif isinstance(keys, list):
        fields["keys"], fields["jwks_url"] = [normalise_jwk(key) for key in keys], ""
    else:
        plan.error(f"{where}.options.keys", "Keys are a list of JWKs, or the URL of a JWKS.")
    attributes = options.get("attributes", {})
    if not isinstance(attributes, Mapping) or not all(isinstance(v, str) for v in attributes.values()):
        plan.error(f"{where}.options.attributes", "Attributes map a name to a claim path (a string).")
    else:
        fields["attributes"] = {str(k): v for k, v in attributes.items()}
    if "challenge" in options and (challenge := _int(plan, f"{where}.options.challenge", options["challenge"])):
        fields["challenge_s"] = challenge
    plan.guards.append(_GuardPlan(where=where, name=name, fields=fields))


def normalise_jwk(key: Any) -> Any:
    """The JWK with its key material in base64url without padding, as RFC 7517 writes it.

    Zilla's example configs write RSA `n` in standard base64 (`+`, `/`, `=`), which jose4j accepts; rewritten
    here so every key is stored in one form and any JWK library reads it.
    """
    if not isinstance(key, Mapping):
        return key
    found = dict(key)
    for name in _KEY_MATERIAL:
        value = found.get(name)
        if isinstance(value, str):
            found[name] = value.strip().replace("+", "-").replace("/", "_").rstrip("=")
    return found


# --- writing ------------------------------------------------------------------------------------------------


def _located(errors: Errors, exc: ValidationError, where: str, names: Mapping[str, str]) -> None:
    """`exc`'s errors under `where`, each service field name rewritten as the file's (`paths[1]` -> `when[1].path`)."""
    for name, messages in (exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}).items():
        key = where if name in ("", NON_FIELD_ERRORS) else f"{where}.{_rename(*_split(name), names)}"
        errors.setdefault(key, []).extend(messages)


def _split(name: str) -> tuple[str, str, str]:
    """`filters[0].key` -> (`filters`, `[`, `0].key`): the field, the separator, the rest."""
    cut = min((index for index in (name.find("."), name.find("[")) if index >= 0), default=len(name))
    return name[:cut], name[cut : cut + 1], name[cut + 1 :]


def _rename(head: str, sep: str, rest: str, names: Mapping[str, str]) -> str:
    if head == "paths" and sep == "[":
        return f"when[{rest}.path" if "." not in rest else f"when[{rest}"
    return f"{names.get(head, head)}{sep}{rest}"


def _attempt(errors: Errors, where: str, names: Mapping[str, str], write: Callable[[], object]) -> bool:
    try:
        write()
    except ValidationError as exc:
        _located(errors, exc, where, names)
        return False
    return True


def do_import_zilla(text: str, *, actor: Actor, dry_run: bool = False, prune: bool = False) -> ImportResult:
    """Import a zilla.yaml: create or replace its endpoints, guards and routes, all or nothing.

    With `dry_run` the writes are made and rolled back, so the result (and any error) is exactly what the
    import would give. With `prune`, routes the file does not name are deleted.
    """
    plan = plan_import(parse(text))
    if plan.errors:
        raise ZillaConfigError(plan.errors)
    result = ImportResult(dry_run=dry_run, ignored=plan.ignored)
    errors: Errors = {}
    with transaction.atomic():
        for endpoint in plan.endpoints:
            _import_endpoint(endpoint, actor, result, errors)
        for guard in plan.guards:
            _import_guard(guard, actor, result, errors)
        for route in plan.routes:
            _import_route(route, actor, result, errors)
        if prune and not errors:
            keep = {route.name for route in plan.routes}
            for name in Route.objects.exclude(name__in=keep).order_by("position", "id").values_list("name", flat=True):
                before = route_state(name)
                do_delete_route(name, actor=actor)
                result.objects.append(_diff(before, None, "route", name))
        if errors:
            raise ZillaConfigError(errors)  # leaves the atomic block: nothing was written
        if dry_run:
            transaction.set_rollback(True)
    return result


def _import_endpoint(plan: _EndpointPlan, actor: Actor, result: ImportResult, errors: Errors) -> None:
    existing = Endpoint.objects.filter(name=plan.name).first()
    before = None if existing is None else endpoint_representation(existing)
    origins, credentials = (
        plan.cors
        if plan.cors is not None
        else ((list(existing.cors_origins), existing.cors_credentials) if existing else ([], False))
    )
    keepalive = plan.keepalive_s
    if keepalive is None:
        keepalive = existing.keepalive_s if existing else DEFAULT_KEEPALIVE_S

    def write() -> Endpoint:
        return do_put_endpoint(
            name=plan.name,
            retry_ms=plan.retry_ms,
            keepalive_s=keepalive,
            cors_origins=origins,
            cors_credentials=credentials,
            actor=actor,
        )

    if _attempt(errors, plan.where, _ENDPOINT_FIELDS, write):
        after = endpoint_representation(Endpoint.objects.get(name=plan.name))
        result.objects.append(_diff(before, after, "endpoint", plan.name))


def _import_guard(plan: _GuardPlan, actor: Actor, result: ImportResult, errors: Errors) -> None:
    existing = Guard.objects.filter(name=plan.name).first()
    before = None if existing is None else guard_representation(existing)
    fields = dict(plan.fields)
    if "cookie" not in fields and existing is not None:
        fields["cookie"] = existing.cookie  # Zilla sets cookies on the http binding: keep ours
    if _attempt(errors, plan.where, _GUARD_FIELDS, lambda: do_put_guard(name=plan.name, **fields, actor=actor)):
        after = guard_representation(Guard.objects.get(name=plan.name))
        result.objects.append(_diff(before, after, "guard", plan.name))


def _import_route(plan: _RoutePlan, actor: Actor, result: ImportResult, errors: Errors) -> None:
    before = route_state(plan.name)
    fields = dict(plan.fields)
    defaults = {"start": START_HISTORICAL, "caught_up": False, "slow_client": SLOW_CLIENT_CLOSE}
    for key, default in defaults.items():
        fields.setdefault(key, before[key] if before is not None else default)
    if _attempt(errors, plan.where, _ROUTE_FIELDS, lambda: do_put_route(name=plan.name, **fields, actor=actor)):
        result.objects.append(_diff(before, route_state(plan.name), "route", plan.name))


# --- export -------------------------------------------------------------------------------------------------


def export_zilla(name: str = "sse-platform", *, strict: bool = False) -> tuple[str, list[str]]:
    """The configuration as a zilla.yaml: guards, and per endpoint an `sse` server and an `sse-kafka` proxy.

    By default our extensions are written too (route names and positions, start, caught-up, slow-client,
    value filters, keep-alive, CORS, cookies), so the file imports back to the same configuration; the notes
    list them, since Zilla itself refuses them. `strict` writes Zilla's schema only and notes what it left out.
    """
    notes: list[str] = []

    def extension(what: str) -> bool:
        notes.append(f"{what} (not in Zilla's schema)" if not strict else f"left out: {what}")
        return not strict

    guards: dict[str, Any] = {}
    for guard in Guard.objects.order_by("name"):
        options: dict[str, Any] = {"issuer": guard.issuer, "audience": guard.audience}
        options["keys"] = guard.jwks_url or list(guard.keys)
        if guard.roles_claim != "scope":
            options["roles"] = guard.roles_claim
        if guard.identity_claim != "sub":
            options["identity"] = guard.identity_claim
        if guard.attributes:
            options["attributes"] = dict(guard.attributes)
        if guard.challenge_s:
            options["challenge"] = guard.challenge_s
        if guard.cookie and extension(f"guard {guard.name}: cookie {guard.cookie}"):
            options["cookie"] = guard.cookie
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
    config: dict[str, Any] = {"name": name}
    if guards:
        config["guards"] = guards
    config["bindings"] = bindings
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True), notes


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
    ):
        if value != default and extension(f"route {route.name}: {key}={value}"):
            with_[key] = value
    exported["with"] = with_
    return exported
