"""Write functions: every change to the configuration goes through here.

They validate as the admin does and raise Django's `ValidationError` with a `message_dict` whose keys name the
bad field: a route's own fields (`topic`, `endpoint`, ...), `paths` / `paths[i]` for its conditions, and
`filters[i]`, `filters[i].key`, `filters[i].headers`, `filters[i].value`, `filters[i].value.path`,
`filters[i].value.equals` for its filters (indexes from 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from bindings.models import (
    DEFAULT_ENDPOINT,
    EVENT_ID_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Route,
    RouteCondition,
    RouteFilter,
    check_route_params,
    default_endpoint,
)

Errors = dict[str, list[str]]

_FILTER_FIELDS = {"key": "key", "headers": "headers", "value_path": "value.path", "value_equals": "value.equals"}
_FILTER_KEYS = frozenset({"key", "headers", "value"})
_VALUE_KEYS = frozenset({"path", "equals"})


def _add(errors: Errors, key: str, messages: Sequence[str] | str) -> None:
    errors.setdefault(key, []).extend([messages] if isinstance(messages, str) else messages)


def _collect(errors: Errors, exc: ValidationError, prefix: str, names: Mapping[str, str] | None = None) -> None:
    """Merge `exc` into `errors`, its field names renamed by `names` and put after `prefix`."""
    for field, messages in exc.message_dict.items():
        if field == NON_FIELD_ERRORS:
            key = prefix or NON_FIELD_ERRORS
        else:
            name = (names or {}).get(field, field)
            key = f"{prefix}.{name}" if prefix else name
        _add(errors, key, messages)


def _endpoint(name: str, errors: Errors) -> Endpoint | None:
    if name == DEFAULT_ENDPOINT:
        return Endpoint.objects.get(pk=default_endpoint())
    found = Endpoint.objects.filter(name=name).first()
    if found is None:
        _add(errors, "endpoint", f"There is no endpoint named {name!r}.")
    return found


def _build_filter(index: int, spec: object, route: Route, errors: Errors) -> RouteFilter | None:
    """A filter from its API form, `{"key": ..., "headers": {...}, "value": {"path": ..., "equals": ...}}`.

    Shapes are checked here, the rest by the model; None (and errors added) if the filter is not valid.
    """
    prefix = f"filters[{index}]"
    if not isinstance(spec, Mapping):
        _add(errors, prefix, "A filter is an object with a key, headers and/or a value.")
        return None
    found: Errors = {}
    unknown = sorted(str(key) for key in spec if key not in _FILTER_KEYS)
    if unknown:
        _add(found, prefix, f"Unknown filter field {', '.join(unknown)}: a filter has key, headers and value.")
    key: Any = spec.get("key")
    if key is not None and not isinstance(key, str):
        _add(found, f"{prefix}.key", "A key is a string, or null for any key.")
        key = None
    value: Any = spec.get("value")
    value_path: Any = ""
    value_equals: Any = ""
    if isinstance(value, Mapping):
        unknown = sorted(str(name) for name in value if name not in _VALUE_KEYS)
        if unknown:
            _add(found, f"{prefix}.value", f"Unknown value field {', '.join(unknown)}: a value has path and equals.")
        value_path, value_equals = value.get("path", ""), value.get("equals", "")
        for name, given in (("path", value_path), ("equals", value_equals)):
            if not isinstance(given, str):
                _add(found, f"{prefix}.value.{name}", f"The value's {name} is a string.")
        if not value_path:
            _add(found, f"{prefix}.value.path", "A value filter needs the path of the value to compare.")
    elif value is not None:
        _add(found, f"{prefix}.value", 'A value filter is an object, e.g. {"path": "status", "equals": "open"}.')
    headers = spec.get("headers", {})
    route_filter = RouteFilter(
        route=route,
        position=index,
        key=key,
        headers={} if headers is None else headers,
        value_path=value_path if isinstance(value_path, str) else "",
        value_equals=value_equals if isinstance(value_equals, str) else "",
    )
    try:
        route_filter.full_clean(exclude=["route"])
    except ValidationError as exc:
        checked: Errors = {}
        _collect(checked, exc, prefix, _FILTER_FIELDS)
        for field, messages in checked.items():
            # A filter whose parts had the wrong shape may look empty to the model: its shape errors say enough.
            if field == prefix and found:
                continue
            _add(found, field, [message for message in messages if message not in found.get(field, [])])
    for field, messages in found.items():
        _add(errors, field, messages)
    return None if found else route_filter


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
) -> Route:
    """Create or replace the route called `name` (idempotent), its conditions and its filters.

    `path` is shorthand for `paths=[path]`. Nothing is written unless everything is valid.
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

    route = Route.objects.select_for_update().filter(name=name).first() or Route(name=name)
    route.topic, route.event_id, route.start = topic, event_id, start
    route.caught_up, route.position, route.slow_client = caught_up, position, slow_client
    found_endpoint = _endpoint(endpoint, errors)
    if found_endpoint is not None:
        route.endpoint = found_endpoint
    try:
        route.full_clean(exclude=None if found_endpoint is not None else ["endpoint"])
    except ValidationError as exc:
        _collect(errors, exc, "")

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

    built = [_build_filter(index, spec, route, errors) for index, spec in enumerate(filter_specs)]
    topic_errors, condition_errors, filter_errors = check_route_params(
        None if "topic" in errors else topic, conditions, built
    )
    if topic_errors:
        _add(errors, "topic", topic_errors)
    for index, messages in condition_errors.items():
        _add(errors, f"paths[{index}]", messages)
    for index, fields in filter_errors.items():
        for field, messages in fields.items():
            _add(errors, f"filters[{index}].{_FILTER_FIELDS[field]}", messages)
    if errors:
        raise ValidationError(errors)

    route.save()
    route.conditions.all().delete()
    route.filters.all().delete()
    RouteCondition.objects.bulk_create([c for c in conditions if c is not None])
    RouteFilter.objects.bulk_create([f for f in built if f is not None])
    return route


@transaction.atomic
def do_put_endpoint(
    *,
    name: str,
    retry_ms: int = 2000,
    keepalive_s: int = 15,
    cors_origins: Sequence[str] = (),
    cors_credentials: bool = False,
) -> Endpoint:
    """Create or replace the endpoint called `name` (idempotent)."""
    endpoint = Endpoint.objects.select_for_update().filter(name=name).first() or Endpoint(name=name)
    endpoint.retry_ms, endpoint.keepalive_s = retry_ms, keepalive_s
    endpoint.cors_origins, endpoint.cors_credentials = list(cors_origins), cors_credentials
    endpoint.full_clean()
    endpoint.save()
    return endpoint


@transaction.atomic
def do_delete_route(name: str) -> bool:
    """Delete the route called `name`; False if there was none."""
    deleted, _ = Route.objects.filter(name=name).delete()
    return deleted > 0
