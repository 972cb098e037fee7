"""Reading an AsyncAPI document's channels into planned routes, guards and endpoints, every problem keyed by where
it is in the document (bindings/asyncapi/document.py writes the plan)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bindings.asyncapi.schema import (
    _DOCUMENT_KEY,
    _FORM_OF_EVENT_ID,
    _NAMED,
    _ROUTE_KEYS,
    EVENT_ID_FORMS,
    EXTENSION,
    SSE_PROTOCOLS,
    _unique,
)
from bindings.patterns import PatternError, parse_path
from bindings.shapes import unknown_keys


@dataclass
class _PlannedRoute:
    name: str
    channels: list[str]
    arguments: dict[str, Any]  # do_put_route keywords, paths included
    explicit: set[str]  # x-sse-kafka keys the document gave (errors on the others go to the channel)

    @classmethod
    def first(
        cls, name: str, channel_id: str, address: str, arguments: dict[str, Any], explicit: set[str]
    ) -> _PlannedRoute:
        """The route planned from its first channel (the topic, if the document names none, from the channel)."""
        topic = arguments.pop("topic", None) or _topic_name(channel_id)
        return cls(name, [channel_id], {"paths": [address], "topic": topic, **arguments}, explicit)


def _add(errors: dict[str, list[str]], where: str, message: str) -> None:
    errors.setdefault(where, []).append(message)


def _resolve(document: Mapping[str, Any], value: Any) -> Any:
    """A local `{"$ref": "#/..."}` followed to what it points at (None if it points nowhere); else `value`."""
    seen = 0
    while isinstance(value, Mapping) and isinstance(value.get("$ref"), str) and seen < 10:  # noqa: PLR2004
        ref: str = value["$ref"]
        if not ref.startswith("#/"):
            return None
        value = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")  # noqa: PLW2901
            value = value.get(part) if isinstance(value, Mapping) else None
        seen += 1
    return value


def _plan(
    document: object, errors: dict[str, list[str]], ignored: list[str]
) -> tuple[list[_PlannedRoute], dict[str, dict[str, dict[str, Any]]]]:
    """The routes, and the guards and endpoints (kind -> name -> do_put_* keywords) to put, from the document
    alone (no database); problems go to `errors`."""
    if not isinstance(document, Mapping):
        _add(errors, "document", "An AsyncAPI document is an object (YAML mapping or JSON object).")
        return [], {}
    for where in _nul_paths(document, ""):
        _add(errors, where or "document", "Null characters are not allowed (Postgres cannot store them).")
    if errors:
        return [], {}
    version = document.get("asyncapi")
    if not isinstance(version, str) or not version.startswith("3."):
        _add(errors, "asyncapi", f"Only AsyncAPI 3 documents can be imported (asyncapi: 3.0.0), not {version!r}.")
        return [], {}
    channels = document.get("channels") or {}
    servers = document.get("servers") or {}
    for key, value in (("channels", channels), ("servers", servers)):
        if not isinstance(value, Mapping):
            _add(errors, key, f"`{key}` is an object of id -> {key[:-1]}.")
    if errors:
        return [], {}
    named = _plan_named(document.get(EXTENSION), errors)
    secured = _secured_channels(document)
    planned: dict[str, _PlannedRoute] = {}
    unnamed: list[tuple[str, str, dict[str, Any], set[str]]] = []  # channels without x-sse-kafka.route: named last
    for channel_id, raw in channels.items():
        found = _channel(document, channel_id, raw, servers=servers, secured=secured, errors=errors, ignored=ignored)
        if found is None:
            continue
        address, arguments, explicit = found
        name = arguments.pop("name", None)
        if name is None:
            unnamed.append((channel_id, address, arguments, explicit))
            continue
        existing = planned.get(name)
        if existing is None:
            planned[name] = _PlannedRoute.first(name, channel_id, address, arguments, explicit)
            continue
        for key, value in arguments.items():  # a later channel of the same route must agree with the first
            if key != "position" and existing.arguments.get(key, value) != value:
                _add(
                    errors,
                    f"channels.{channel_id}.{EXTENSION}.{_DOCUMENT_KEY[key]}",
                    f"Channel {existing.channels[0]} of route {name!r} says otherwise: channels of one route agree.",
                )
        existing.channels.append(channel_id)
        existing.arguments["paths"].append(address)
    for channel_id, address, arguments, explicit in unnamed:
        name = _unique(_route_name(channel_id), planned)
        planned[name] = _PlannedRoute.first(name, channel_id, address, arguments, explicit)
    routes = list(planned.values())
    for index, route in enumerate(routes):
        route.arguments.setdefault("position", index)
        route.arguments["name"] = route.name
    return routes, named


def _channel(
    document: Mapping[str, Any],
    channel_id: str,
    raw: object,
    *,
    servers: Mapping[str, Any],
    secured: Mapping[str, str],
    errors: dict[str, list[str]],
    ignored: list[str],
) -> tuple[str, dict[str, Any], set[str]] | None:
    """(address, do_put_route keywords, x-sse-kafka keys given) for an SSE channel; None if it is ignored
    (and listed so in `ignored`) or wrong (and the problem is in `errors`)."""
    where = f"channels.{channel_id}"
    channel = _resolve(document, raw)
    if not isinstance(channel, Mapping):
        if channel is None and isinstance(raw, Mapping) and "$ref" in raw:
            ignored.append(f"channel {channel_id}: ignored, $ref {raw['$ref']!r} is not in this document")
        else:
            _add(errors, where, "A channel is an object.")
        return None
    reason = _not_sse(document, channel, servers, where, errors)
    if reason is not None:
        ignored.append(f"channel {channel_id}: ignored, {reason}")
        return None
    extension = channel.get(EXTENSION, {})
    if not isinstance(extension, Mapping):
        _add(errors, f"{where}.{EXTENSION}", f"`{EXTENSION}` is an object with the route's topic, filters...")
        return None
    arguments = _route_arguments(extension, f"{where}.{EXTENSION}", errors)
    if arguments is None:
        return None
    if channel_id in secured and "guarded" not in extension:
        _add(
            errors,
            f"{where}.{EXTENSION}.guarded",
            f"Operation {secured[channel_id]} requires security: say which guards protect this channel "
            '(e.g. {"jwt": ["read:items"]}), or {} to serve it to anyone.',
        )
        return None
    return channel["address"], arguments, set(extension)


def _not_sse(
    document: Mapping[str, Any],
    channel: Mapping[str, Any],
    servers: Mapping[str, Any],
    where: str,
    errors: dict[str, list[str]],
) -> str | None:
    """Why the channel is not an SSE stream of this platform (its servers' protocols, its address), or None."""
    refs = channel.get("servers")
    if refs is not None and not isinstance(refs, list):
        _add(errors, f"{where}.servers", "A channel's servers are a list of references to servers.")
        return "its servers are not a list"
    chosen = [_resolve(document, ref) for ref in refs] if refs else list(servers.values())
    protocols = sorted({str(server.get("protocol", "")).lower() for server in chosen if isinstance(server, Mapping)})
    if chosen and not SSE_PROTOCOLS.intersection(protocols):
        return f"served over {', '.join(protocols) or 'no known protocol'}, not HTTP (SSE)"
    address = channel.get("address")
    if address is None:
        return "it has no address (a dynamic channel): no path to serve it at"
    if not isinstance(address, str) or not address.startswith("/"):
        return f"its address {address!r} is not a path"
    try:
        parse_path(address)
    except PatternError as exc:
        _add(errors, f"{where}.address", str(exc))
        return "its address is not a valid path pattern"
    return None


def _secured_channels(document: Mapping[str, Any]) -> dict[str, str]:
    """Channel id -> the name of an operation on it that declares `security`."""
    found: dict[str, str] = {}
    operations = document.get("operations")
    if not isinstance(operations, Mapping):
        return found
    for name, raw in operations.items():
        operation = _resolve(document, raw)
        if not isinstance(operation, Mapping) or not operation.get("security"):
            continue
        ref = (operation.get("channel") or {}).get("$ref") if isinstance(operation.get("channel"), Mapping) else None
        if isinstance(ref, str) and ref.startswith("#/channels/"):
            found.setdefault(ref.removeprefix("#/channels/").replace("~1", "/").replace("~0", "~"), str(name))
    return found


def _route_arguments(extension: Mapping[str, Any], where: str, errors: dict[str, list[str]]) -> dict[str, Any] | None:
    """do_put_route keywords from a channel's `x-sse-kafka` (types checked here, values by do_put_route)."""
    arguments: dict[str, Any] = {}
    unknown = unknown_keys(extension, list(_ROUTE_KEYS))
    for key, messages in unknown.items():
        errors.setdefault(f"{where}.{key}", []).extend(messages)
    failed = bool(unknown)
    for key, value in extension.items():
        if key not in _ROUTE_KEYS:
            continue
        argument, kind, described = _ROUTE_KEYS[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            _add(errors, f"{where}.{key}", f"`{key}` is {described}.")
            failed = True
            continue
        if key == "event-id":
            value = EVENT_ID_FORMS.get(str(value), value)  # noqa: PLW2901
            if value not in _FORM_OF_EVENT_ID:
                _add(errors, f"{where}.{key}", f"`event-id` is {' or '.join(EVENT_ID_FORMS)}.")
                failed = True
                continue
        arguments[argument] = value
    if failed:
        return None
    return arguments


def _plan_named(extension: object, errors: dict[str, list[str]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Guards and endpoints from the document's top-level `x-sse-kafka` (our export writes those its routes use)."""
    if extension is None:
        return {}
    if not isinstance(extension, Mapping):
        _add(errors, EXTENSION, f"`{EXTENSION}` is an object with guards and endpoints.")
        return {}
    for unknown, messages in unknown_keys(extension, list(_NAMED)).items():
        errors.setdefault(f"{EXTENSION}.{unknown}", []).extend(messages)
    planned: dict[str, dict[str, dict[str, Any]]] = {}
    for kind, (singular, keys, required) in _NAMED.items():
        where = f"{EXTENSION}.{kind}"
        found = extension.get(kind) or {}
        if not isinstance(found, Mapping):
            _add(errors, where, f"`{kind}` is an object of {singular} name -> settings.")
            continue
        for name, settings in found.items():
            if not isinstance(settings, Mapping):
                _add(errors, f"{where}.{name}", f"A {singular}'s settings are an object ({', '.join(keys)}).")
                continue
            arguments: dict[str, Any] = {}
            for key in required:
                if key not in settings:
                    _add(errors, f"{where}.{name}.{key}", f"A {singular} needs `{key}`.")
            for key, messages in unknown_keys(settings, list(keys)).items():
                errors.setdefault(f"{where}.{name}.{key}", []).extend(messages)
            for key, value in settings.items():
                if key not in keys:
                    continue
                argument, kind_of_value, described = keys[key]
                if not isinstance(value, kind_of_value) or (kind_of_value is int and isinstance(value, bool)):
                    _add(errors, f"{where}.{name}.{key}", f"`{key}` is {described}.")
                    continue
                arguments[argument] = value
            planned.setdefault(kind, {})[str(name)] = arguments
    return planned


def _nul_paths(value: object, path: str) -> list[str]:
    """Where a NUL character is in `value` (a JSON document can carry one, `\\u0000`; YAML cannot)."""
    if isinstance(value, str):
        return [path] if "\x00" in value else []
    if isinstance(value, Mapping):
        found: list[str] = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found.extend([path] if "\x00" in str(key) else _nul_paths(item, where))
        return found
    if isinstance(value, list):
        return [where for index, item in enumerate(value) for where in _nul_paths(item, f"{path}[{index}]")]
    return []


def _route_name(channel_id: str) -> str:
    """A route name (a slug) from a channel id."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", channel_id).strip("-")[:100] or "channel"


def _topic_name(channel_id: str) -> str:
    """A legal Kafka topic name from a channel id: letters, digits, '.', '_' and '-', at most 249 of them."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", channel_id).strip("-")[:249]
    return name if name not in ("", ".", "..") else "topic"
