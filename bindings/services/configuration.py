"""Write functions for endpoints, routes, guards and revocations (`bindings.services` re-exports them).

They validate as the admin does and raise Django's `ValidationError` with a `message_dict` whose keys name the
bad field: a route's own fields (`topic`, `endpoint`, ...), `paths` / `paths[i]` for its conditions, and
`filters[i]`, `filters[i].key`, `filters[i].headers`, `filters[i].value`, `filters[i].value.path`,
`filters[i].value.equals`, `filters[i].expression` for its filters (indexes from 0), `guarded` /
`guarded.<guard>` for its guards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from bindings import changes
from bindings.history import SHELL, Actor, record, route_state
from bindings.models import (
    DEFAULT_ENDPOINT,
    DEFAULT_IDENTITY_CLAIM,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_RETRY_MS,
    DEFAULT_ROLES_CLAIM,
    EVENT_ID_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Guard,
    Route,
    RouteCondition,
    RouteFilter,
    RouteGuard,
    check_route_params,
    default_endpoint,
)
from bindings.models.revocation import Revocation, revocation_representation
from bindings.representations import endpoint_representation, guard_representation
from bindings.services.checks import Errors
from bindings.services.checks import add as _add
from bindings.services.checks import check_shape as _check_shape
from bindings.services.checks import collect as _collect
from bindings.shapes import EndpointShape, FilterShape, GuardShape, RevocationShape, RouteShape, problems

_FILTER_FIELDS = {
    "key": "key",
    "headers": "headers",
    "value_path": "value.path",
    "value_equals": "value.equals",
    "expression": "expression",
}


def _endpoint(name: str, errors: Errors) -> Endpoint | None:
    if name == DEFAULT_ENDPOINT:
        return Endpoint.objects.get(pk=default_endpoint())
    found = Endpoint.objects.filter(name=name).first()
    if found is None:
        _add(errors, "endpoint", f"There is no endpoint named {name!r}.")
    return found


def _build_filter(index: int, spec: object, route: Route, errors: Errors) -> RouteFilter | None:
    """A filter from its API form (`FilterShape`), checked by its shape and then its model; None (and errors
    added under `filters[<index>]`) if it is not valid."""
    prefix = f"filters[{index}]"
    shape = FilterShape(data=spec)
    found = problems(shape, prefix)
    if found:
        for field, messages in found.items():
            _add(errors, field, messages)
        return None
    value = shape.validated_data.get("value") or {}
    headers = shape.validated_data.get("headers", {})
    route_filter = RouteFilter(
        route=route,
        position=index,
        key=shape.validated_data.get("key"),
        headers={} if headers is None else headers,
        value_path=value.get("path", ""),
        value_equals=value.get("equals", ""),
        expression=shape.validated_data.get("expression", ""),
    )
    try:
        route_filter.full_clean(exclude=["route"])
    except ValidationError as exc:
        _collect(errors, exc, prefix, _FILTER_FIELDS)
        return None
    return route_filter


@transaction.atomic
def do_put_route(
    *,
    name: str,
    topic: str,
    paths: Sequence[str] | None = None,
    path: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    event_id: str = EVENT_ID_ETAG,
    start: str = START_HISTORICAL,
    caught_up: bool = False,
    slow_client: str = SLOW_CLIENT_CLOSE,
    endpoint: str = DEFAULT_ENDPOINT,
    position: int = 0,
    guarded: Mapping[str, Sequence[str]] | None = None,
    fields: Sequence[str] = (),
    conflate_ms: int = 0,
    actor: Actor = SHELL,
) -> Route:
    """Create or replace the route called `name` (idempotent), its conditions, filters and guards.

    `path` is shorthand for `paths=[path]`; `guarded` maps a guard's name to the roles a token needs. Nothing
    is written unless everything is valid.
    """
    errors: Errors = {}
    if path is not None:
        if paths is not None:
            _add(errors, "path", "Give paths or path, not both.")
        paths = [path]
    if isinstance(paths, str):
        _add(errors, "paths", "Paths are a list of path patterns.")
        paths = None
    paths = list(paths or [])
    filter_specs: Sequence[object] = filters
    if isinstance(filters, str | bytes) or not isinstance(filters, Sequence):
        _add(errors, "filters", "Filters are a list of objects.")
        filter_specs = ()

    scalars = {"name": name, "topic": topic, "event_id": event_id, "start": start, "caught_up": caught_up}
    scalars |= {"slow_client": slow_client, "endpoint": endpoint, "position": position, "fields": fields}
    scalars["conflate_ms"] = conflate_ms
    _check_shape(RouteShape, scalars, errors)  # paths, filters and guards are checked one by one below
    if errors:
        raise ValidationError(errors)
    route = Route.objects.select_for_update().filter(name=name).first() or Route(name=name)
    before = route_state(name) if route.pk is not None else None
    route_guards = _build_guards(guarded, route, errors)
    route.topic, route.event_id, route.start = topic, event_id, start
    route.caught_up, route.position, route.slow_client = caught_up, position, slow_client
    route.fields, route.conflate_ms = list(fields), conflate_ms
    found_endpoint = _endpoint(endpoint, errors)
    if found_endpoint is not None:
        route.endpoint = found_endpoint
    try:
        route.full_clean(exclude=None if found_endpoint is not None else ["endpoint"])
    except ValidationError as exc:
        _collect(errors, exc, "")

    conditions = _build_conditions(paths, route, errors)

    built = [_build_filter(index, spec, route, errors) for index, spec in enumerate(filter_specs)]
    topic_errors, condition_errors, filter_errors = check_route_params(
        None if "topic" in errors else topic,
        conditions,
        built,
        guards=None if "guarded" in errors else {g.guard.name: set(g.guard.attributes) for g in route_guards},
    )
    if topic_errors:
        _add(errors, "topic", topic_errors)
    for index, messages in condition_errors.items():
        _add(errors, f"paths[{index}]", messages)
    for index, by_field in filter_errors.items():
        for field, messages in by_field.items():
            _add(errors, f"filters[{index}].{_FILTER_FIELDS[field]}", messages)
    if errors:
        raise ValidationError(errors)

    route.save()
    route.conditions.all().delete()
    route.filters.all().delete()
    RouteCondition.objects.bulk_create([c for c in conditions if c is not None])
    RouteFilter.objects.bulk_create([f for f in built if f is not None])
    route.guards.all().delete()
    RouteGuard.objects.bulk_create(route_guards)
    record("route", name, before, route_state(name), actor)
    return route


def _build_conditions(paths: Sequence[str], route: Route, errors: Errors) -> list[RouteCondition | None]:
    """The route's conditions, None for each that is not valid (its errors under `paths[i]`)."""
    conditions: list[RouteCondition | None] = []
    for index, pattern in enumerate(paths):
        condition = RouteCondition(route=route, path=pattern, position=index)
        try:
            condition.full_clean(exclude=["route"])
        except ValidationError as exc:
            _add(errors, f"paths[{index}]", exc.message_dict.get("path") or exc.messages)
            conditions.append(None)
        else:
            conditions.append(condition)
    if not paths:
        _add(errors, "paths", "A route needs at least one path.")
    return conditions


def _build_guards(guarded: object, route: Route, errors: Errors) -> list[RouteGuard]:
    """The route's guards from `{"<guard>": ["role", ...]}`; errors under `guarded` and `guarded.<guard>`."""
    if guarded is None:
        return []
    if not isinstance(guarded, Mapping):
        _add(errors, "guarded", 'Guards are an object of guard name -> roles, e.g. {"jwt": ["read:items"]}.')
        return []
    found = {guard.name: guard for guard in Guard.objects.filter(name__in=[str(name) for name in guarded])}
    built = []
    for name, roles in guarded.items():
        where = f"guarded.{name}"
        guard = found.get(str(name))
        if guard is None:
            _add(errors, where, f"There is no guard named {name!r}.")
            continue
        if (
            isinstance(roles, str | bytes)
            or not isinstance(roles, Sequence)
            or not all(isinstance(role, str) for role in roles)
        ):
            _add(errors, where, "Roles are a list of strings (an empty list: any valid token).")
            continue
        route_guard = RouteGuard(route=route, guard=guard, roles=list(roles))
        try:
            route_guard.clean()
        except ValidationError as exc:
            _add(errors, where, exc.messages)
            continue
        built.append(route_guard)
    return built


@transaction.atomic
def do_put_endpoint(
    *,
    name: str,
    retry_ms: int = DEFAULT_RETRY_MS,
    keepalive_s: int = DEFAULT_KEEPALIVE_S,
    cors_origins: Sequence[str] = (),
    cors_credentials: bool = False,
    max_streams_per_client: int | None = None,
    max_streams_per_identity: int | None = None,
    actor: Actor = SHELL,
) -> Endpoint:
    """Create or replace the endpoint called `name` (idempotent)."""
    values = {"retry_ms": retry_ms, "keepalive_s": keepalive_s, "cors_origins": list(cors_origins)} | {
        "cors_credentials": cors_credentials,
        "max_streams_per_client": max_streams_per_client,
        "max_streams_per_identity": max_streams_per_identity,
    }
    _check_shape(EndpointShape, {"name": name, **values})
    endpoint = Endpoint.objects.select_for_update().filter(name=name).first() or Endpoint(name=name)
    before = None if endpoint.pk is None else endpoint_representation(endpoint)
    for field, value in values.items():
        setattr(endpoint, field, value)
    endpoint.full_clean()
    endpoint.save()
    record("endpoint", name, before, endpoint_representation(endpoint), actor)
    return endpoint


@transaction.atomic
def do_put_guard(
    *,
    name: str,
    issuer: str,
    audience: str,
    keys: Sequence[Mapping[str, Any]] = (),
    jwks_url: str = "",
    roles_claim: str = DEFAULT_ROLES_CLAIM,
    identity_claim: str = DEFAULT_IDENTITY_CLAIM,
    attributes: Mapping[str, str] | None = None,
    challenge_s: int = 0,
    cookie: str = "",
    allow_tokens_without_exp: bool = False,
    actor: Actor = SHELL,
) -> Guard:
    """Create or replace the JWT guard called `name` (idempotent); routes using it keep using it."""
    given: dict[str, Any] = {
        "name": name,
        "issuer": issuer,
        "audience": audience,
        "keys": keys,
        "jwks_url": jwks_url,
        "roles_claim": roles_claim,
        "identity_claim": identity_claim,
        "challenge_s": challenge_s,
        "cookie": cookie,
        "allow_tokens_without_exp": allow_tokens_without_exp,
    }
    _check_shape(GuardShape, given if attributes is None else {**given, "attributes": attributes})
    guard = Guard.objects.select_for_update().filter(name=name).first() or Guard(name=name)
    before = None if guard.pk is None else guard_representation(guard)
    guard.issuer, guard.audience, guard.jwks_url = issuer, audience, jwks_url
    guard.keys = list(keys) if isinstance(keys, Sequence) and not isinstance(keys, str | bytes) else keys
    guard.roles_claim, guard.identity_claim = roles_claim, identity_claim
    guard.attributes = dict(attributes) if isinstance(attributes, Mapping) else attributes
    guard.challenge_s, guard.cookie = challenge_s, cookie
    guard.allow_tokens_without_exp = allow_tokens_without_exp
    guard.full_clean()
    guard.save()
    after = guard_representation(guard)
    record("guard", name, before, after, actor)
    if before is not None and before != after:
        for route_name in Route.objects.filter(guards__guard=guard).values_list("name", flat=True):
            changes.announce_after_commit("route", route_name)
    return guard


@transaction.atomic
def do_delete_route(name: str, *, actor: Actor = SHELL) -> bool:
    """Delete the route called `name`; False if there was none."""
    before = route_state(name)
    deleted, _ = Route.objects.filter(name=name).delete()
    record("route", name, before, None, actor)
    return deleted > 0


def _delete_unused(model: type[Endpoint] | type[Guard], kind: str, name: str, actor: Actor) -> bool:
    found = model.objects.select_for_update().filter(name=name).first()
    if found is None:
        return False
    users = list(Route.objects.filter(**({"endpoint": found} if kind == "endpoint" else {"guards__guard": found})))
    if users:
        route_names = ", ".join(sorted(route.name for route in users))
        raise ValidationError({"name": [f"Routes use this {kind}: {route_names}. Change or delete them first."]})
    before = endpoint_representation(found) if isinstance(found, Endpoint) else guard_representation(found)
    found.delete()
    record(kind, name, before, None, actor)
    return True


@transaction.atomic
def do_delete_endpoint(name: str, *, actor: Actor = SHELL) -> bool:
    """Delete the endpoint called `name` unless a route uses it; False if there was none."""
    return _delete_unused(Endpoint, "endpoint", name, actor)


@transaction.atomic
def do_delete_guard(name: str, *, actor: Actor = SHELL) -> bool:
    """Delete the guard called `name` unless a route uses it; False if there was none."""
    return _delete_unused(Guard, "guard", name, actor)


@transaction.atomic
def do_revoke(
    *, guard: str, until: datetime, identity: str = "", jti: str = "", reason: str = "", actor: Actor = SHELL
) -> Revocation:
    """Refuse `guard`'s tokens of this identity, or this token id (`jti`), until `until`, in every web process."""
    _check_shape(RevocationShape, {"guard": guard, "until": until, "identity": identity, "jti": jti, "reason": reason})
    found = Guard.objects.filter(name=guard).first()
    errors: Errors = {} if found else {"guard": [f"There is no guard named {guard!r}."]}
    revocation = Revocation(guard=found, identity=identity, jti=jti, until=until, reason=reason)
    revocation.created_by = actor.name[:150]
    try:
        revocation.full_clean(exclude=["guard"])
    except ValidationError as exc:
        _collect(errors, exc, "")
    if errors:
        raise ValidationError(errors)
    revocation.save()
    record("revocation", str(revocation.pk), None, revocation_representation(revocation), actor)
    return revocation


@transaction.atomic
def do_change_revocation(pk: int, *, until: datetime, reason: str, actor: Actor = SHELL) -> Revocation | None:
    """Move a revocation's end (sooner lifts it sooner) or reword its reason; None if there is none."""
    revocation = Revocation.objects.select_for_update().select_related("guard").filter(pk=pk).first()
    if revocation is not None:
        before = revocation_representation(revocation)
        revocation.until, revocation.reason = until, reason
        revocation.full_clean(exclude=["guard"])
        revocation.save()
        record("revocation", str(pk), before, revocation_representation(revocation), actor)
    return revocation


@transaction.atomic
def do_delete_revocation(pk: int, *, actor: Actor = SHELL) -> bool:
    """Lift a revocation now; False if there was none."""
    revocation = Revocation.objects.select_for_update().select_related("guard").filter(pk=pk).first()
    if revocation is not None:
        record("revocation", str(pk), revocation_representation(revocation), None, actor)
        revocation.delete()
    return revocation is not None
