"""zilla.yaml import and export: endpoints, JWT guards and sse-kafka routes to and from Zilla's configuration.

This module parses a file, plans it and writes the plan (all or nothing, dry runs included); it is the format's
entry point. The planning of endpoints and routes is in plan.py, of guards in guards.py, the export
in export.py, the result type in bindings/documents/importing.py.

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
- `catalogs:` and the `key` / `value` models of a kafka binding's `options.topics` become catalogs and topic
  models (bindings/zilla/catalogs.py says how).
Everything else (tcp, tls, http, filesystem bindings, the rest of kafka bindings, other guard types and
catalog types, vaults, telemetry) is listed as ignored in the result, never dropped silently.

Our extensions (docs/contract.md §7) ride in the same places, so an export imports back to the same
configuration: route `name` and `position`, `with.start`, `with.caught_up`, `with.slow_client`, `with.fields`,
`with.conflate_ms`, a filter's `value: {path, equals}` and `expression`, the sse binding's `options.keepalive`
(seconds), `options.cors: {origins, credentials}` and `options.endpoint` (the endpoint's name when the binding's
name cannot be it), and a jwt guard's `options.cookie`. What Zilla cannot say (keep-alive, CORS, the guard's
cookie, a route's start, caught-up, slow-client policy, fields and conflation) keeps its current value when the
file leaves it out, so importing a plain Zilla file never resets what was set here.

Every write goes through `bindings.services` in one transaction: all of it or nothing. Errors are keyed by
where they are in the file (`bindings.<binding>.routes[<i>].with.topic`, `guards.<guard>.options.keys`).
A dry run makes the same writes, reports them and rolls back, so it validates exactly as the import would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

from bindings.documents import yaml_io
from bindings.documents.importing import ImportResult, Write, run_import
from bindings.history import CATALOG, TOPIC_MODEL, Actor, route_state
from bindings.models import (
    DEFAULT_KEEPALIVE_S,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Guard,
    Route,
)
from bindings.services import (
    do_delete_route,
    do_put_catalog,
    do_put_endpoint,
    do_put_guard,
    do_put_route,
    do_put_topic_model,
)
from bindings.zilla.catalogs import catalog_fields, plan_catalogs, plan_topics
from bindings.zilla.export import export_zilla
from bindings.zilla.guards import _plan_guard
from bindings.zilla.plan import (
    _TOP_KEYS,
    MAX_VALUES,
    ZillaConfigError,
    _EndpointPlan,
    _GuardPlan,
    _NamedPlan,
    _Plan,
    _plan_endpoints,
    _plan_proxy,
    _RoutePlan,
    _unknown,
)

# The format's entry points. Parsing and planning are here; shapes, endpoints and routes in plan.py, guards
# in guards.py, the export in export.py.
__all__ = ["ImportResult", "ZillaConfigError", "do_import_zilla", "export_zilla"]


def parse(text: str) -> Mapping[str, Any]:
    try:
        # Zilla files may share options through anchors; what aliases expand to is bounded below (MAX_VALUES).
        config = yaml_io.load(text, aliases=True)
    except yaml_io.DocumentError as exc:
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


def plan_import(config: Mapping[str, Any]) -> _Plan:
    """What importing `config` would write, what it ignores, and every problem of shape; no database."""
    plan = _Plan()
    _unknown(plan, "", config, _TOP_KEYS)
    plan_catalogs(plan, config.get("catalogs"))
    for key in ("vaults", "telemetry"):
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
        elif kind == "kafka" and plan_topics(plan, str(binding_name), binding):
            continue
        elif kind != "sse":
            plan.ignored.append(f"binding {binding_name} ({kind}): ignored, not an SSE binding")
    for guard_name, guard in (config.get("guards") or {}).items():
        _plan_guard(plan, str(guard_name), guard)
    if not (plan.routes or plan.endpoints or plan.guards or plan.catalogs or plan.topic_models or plan.errors):
        plan.error("bindings", "Nothing to import: no sse-kafka binding, jwt guard, catalog or topic model here.")
    return plan


# Where a service's error field lives in the file, by kind.
_ROUTE_FIELDS = {
    "topic": "with.topic",
    "paths": "when",
    "filters": "with.filters",
    "event_id": "with.event.id",
    "start": "with.start",
    "caught_up": "with.caught_up",
    "slow_client": "with.slow_client",
    "fields": "with.fields",
    "conflate_ms": "with.conflate_ms",
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

# --- writing ------------------------------------------------------------------------------------------------


def _locator(where: str, names: Mapping[str, str]) -> Callable[[str], str]:
    """A service's error key placed in the file under `where` (`paths[1]` -> `<where>.when[1].path`)."""

    def locate(key: str) -> str:
        return f"{where}.{_rename(*_split(key), names)}" if key else where

    return locate


def _split(name: str) -> tuple[str, str, str]:
    """`filters[0].key` -> (`filters`, `[`, `0].key`): the field, the separator, the rest."""
    cut = min((index for index in (name.find("."), name.find("[")) if index >= 0), default=len(name))
    return name[:cut], name[cut : cut + 1], name[cut + 1 :]


def _rename(head: str, sep: str, rest: str, names: Mapping[str, str]) -> str:
    if head == "paths" and sep == "[":
        return f"when[{rest}.path" if "." not in rest else f"when[{rest}"
    return f"{names.get(head, head)}{sep}{rest}"


def do_import_zilla(text: str, *, actor: Actor, dry_run: bool = False, prune: bool = False) -> ImportResult:
    """Import a zilla.yaml: create or replace its endpoints, guards and routes, all or nothing.

    With `dry_run` the writes are made and rolled back, so the result (and any error) is exactly what the
    import would give. With `prune`, routes the file does not name are deleted.
    """
    plan = plan_import(parse(text))
    if plan.errors:
        raise ZillaConfigError(plan.errors)

    def writes() -> Iterator[Write]:
        yield from (_catalog_write(catalog, plan, actor) for catalog in plan.catalogs)
        yield from (_topic_model_write(topic_model, actor) for topic_model in plan.topic_models)
        yield from (_endpoint_write(endpoint, actor) for endpoint in plan.endpoints)
        yield from (_guard_write(guard, actor) for guard in plan.guards)
        yield from (_route_write(route, actor) for route in plan.routes)
        if prune:
            keep = {route.name for route in plan.routes}
            for name in Route.objects.exclude(name__in=keep).order_by("position", "id").values_list("name", flat=True):
                yield Write("route", name, "", partial(do_delete_route, name, actor=actor), lambda key: key)

    return run_import(writes(), dry_run=dry_run, ignored=plan.ignored, error=ZillaConfigError)


def _endpoint_write(plan: _EndpointPlan, actor: Actor) -> Write:
    existing = Endpoint.objects.filter(name=plan.name).first()
    origins, credentials = (
        plan.cors
        if plan.cors is not None
        else ((list(existing.cors_origins), existing.cors_credentials) if existing else ([], False))
    )
    keepalive = plan.keepalive_s
    if keepalive is None:
        keepalive = existing.keepalive_s if existing else DEFAULT_KEEPALIVE_S
    put = partial(
        do_put_endpoint,
        name=plan.name,
        retry_ms=plan.retry_ms,
        keepalive_s=keepalive,
        cors_origins=origins,
        cors_credentials=credentials,
        actor=actor,
    )
    return Write("endpoint", plan.name, plan.where, put, _locator(plan.where, _ENDPOINT_FIELDS))


def _guard_write(plan: _GuardPlan, actor: Actor) -> Write:
    existing = Guard.objects.filter(name=plan.name).first()
    fields = dict(plan.fields)
    if "cookie" not in fields and existing is not None:
        fields["cookie"] = existing.cookie  # Zilla sets cookies on the http binding: keep ours
    put = partial(do_put_guard, name=plan.name, **fields, actor=actor)
    return Write("guard", plan.name, plan.where, put, _locator(plan.where, _GUARD_FIELDS))


_CATALOG_FIELDS = {
    "kind": "type",
    "url": "options.url",
    "max_age_s": "options.max-age",
    "subjects": "options.subjects",
}


def _catalog_write(catalog: _NamedPlan, plan: _Plan, actor: Actor) -> Write:
    put = partial(do_put_catalog, name=catalog.name, **catalog_fields(catalog, plan.topic_models), actor=actor)
    return Write(CATALOG, catalog.name, catalog.where, put, _locator(catalog.where, _CATALOG_FIELDS))


def _topic_model_write(topic_model: _NamedPlan, actor: Actor) -> Write:
    put = partial(do_put_topic_model, topic=topic_model.name, **topic_model.fields, actor=actor)
    return Write(TOPIC_MODEL, topic_model.name, topic_model.where, put, _locator(topic_model.where, {"topic": "name"}))


def _route_write(plan: _RoutePlan, actor: Actor) -> Write:
    before = route_state(plan.name)
    fields = dict(plan.fields)
    defaults = {"start": START_HISTORICAL, "caught_up": False, "slow_client": SLOW_CLIENT_CLOSE, "fields": []}
    defaults["conflate_ms"] = 0
    for key, default in defaults.items():  # what Zilla cannot say keeps its value, or takes the default
        fields.setdefault(key, before[key] if before is not None else default)
    put = partial(do_put_route, name=plan.name, **fields, actor=actor)
    return Write("route", plan.name, plan.where, put, _locator(plan.where, _ROUTE_FIELDS))
