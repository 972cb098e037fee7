"""AsyncAPI 3.0: the routes as a document a client can read, and a document's SSE channels as routes.

Export: each path pattern of a route is a channel (its `{name}` segments are channel parameters) with one
`receive` operation, written from the client's side: what a browser subscribing to the address receives. The
messages are the SSE events a stream sends (`event`, `delete`, `reset`, and `caught-up` / `challenge` where the
route has them), each with the `id:` it carries; a guarded route's operation refers to an http bearer (JWT)
security scheme per guard and names the roles in its description (AsyncAPI 3.0 allows `scopes` only on oauth2 and
openIdConnect schemes). Everything a route is made of that AsyncAPI has no word for (topic, filters, event-id
form, start, slow-client policy, guards and roles) is under the channel's `x-sse-kafka`, and the guards and
endpoints the routes use under the document's (guards with their public keys only), so importing our own export
into an empty database gives the same configuration.

Import: a channel whose address is a path, served over HTTP, becomes a route (channels of one route are merged
by `x-sse-kafka.route`); other channels are listed as ignored with the reason, never dropped silently. All of it
or nothing, every write through `bindings.services`; problems are keyed by where they are in the document, e.g.
`channels.items.x-sse-kafka.topic`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from bindings.models import (
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    PRIVATE_JWK_MEMBERS,
    START_HISTORICAL,
    Endpoint,
    Guard,
    Route,
    routes_in_order,
)
from bindings.patterns import PatternError, parse_path
from bindings.representations import endpoint_representation, guard_representation, route_representation
from bindings.services import Actor, do_put_endpoint, do_put_guard, do_put_route

EXTENSION = "x-sse-kafka"
SSE_PROTOCOLS = frozenset({"http", "https", "sse"})
EVENT_ID_FORMS = {"etag": EVENT_ID_ETAG, "key-and-etag": EVENT_ID_KEY_AND_ETAG}
_FORM_OF_EVENT_ID = {template: form for form, template in EVENT_ID_FORMS.items()}

# x-sse-kafka key on a channel -> do_put_route argument, and the type the value must have.
_ROUTE_KEYS: dict[str, tuple[str, type | tuple[type, ...], str]] = {
    "route": ("name", str, "a string"),
    "position": ("position", int, "an integer"),
    "endpoint": ("endpoint", str, "a string"),
    "topic": ("topic", str, "a string"),
    "filters": ("filters", list, "a list"),
    "event-id": ("event_id", str, "a string"),
    "start": ("start", str, "a string"),
    "caught-up": ("caught_up", bool, "true or false"),
    "slow-client": ("slow_client", str, "a string"),
    "guarded": ("guarded", dict, 'an object of guard name -> roles, e.g. {"jwt": ["read:items"]}'),
}
_DOCUMENT_KEY = {argument: key for key, (argument, _, _) in _ROUTE_KEYS.items()}
_ENDPOINT_KEYS: dict[str, tuple[str, type, str]] = {
    "retry-ms": ("retry_ms", int, "an integer"),
    "keepalive-s": ("keepalive_s", int, "an integer"),
    "cors-origins": ("cors_origins", list, "a list of origins"),
    "cors-credentials": ("cors_credentials", bool, "true or false"),
}
_GUARD_KEYS: dict[str, tuple[str, type, str]] = {
    "issuer": ("issuer", str, "a string"),
    "audience": ("audience", str, "a string"),
    "keys": ("keys", list, "a JWKS list of public keys"),
    "jwks-url": ("jwks_url", str, "a URL"),
    "roles-claim": ("roles_claim", str, "a claim path"),
    "identity-claim": ("identity_claim", str, "a claim path"),
    "attributes": ("attributes", dict, "an object of name -> claim path"),
    "challenge-s": ("challenge_s", int, "an integer"),
    "cookie": ("cookie", str, "a cookie name"),
}
# Top-level x-sse-kafka: what routes refer to by name, written before the routes.
_NAMED: dict[str, tuple[str, dict[str, tuple[str, type, str]], tuple[str, ...]]] = {
    "guards": ("guard", _GUARD_KEYS, ("issuer", "audience")),
    "endpoints": ("endpoint", _ENDPOINT_KEYS, ()),
}

ETAG_ID = (
    "`${etag}`: base64url (padded) of a byte 0x01, the zig-zag varint partition count, then for every partition of "
    "the topic its number and the next offset to read (zig-zag varints); `/` and the message's `etag` header follow "
    "when it has one."
)
KEY_AND_ETAG_ID = (
    'A JSON array `["<base64url key>","<etag>"]` (`null` for a message without a key), where `<etag>` is the '
    + ETAG_ID.removesuffix(".")
    + "."
)
RESUME = (
    "A browser sends the last `id:` it received back as `Last-Event-ID` when it reconnects (or give it as the "
    "`lastEventId` query parameter); the stream resumes exactly after that event, nothing lost or repeated."
)


# Export


def export_asyncapi(server_url: str, *, title: str = "SSE over Kafka", version: str = "1.0.0") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every route, served at `server_url` (scheme://host[:port][/path]).

    Raises ValueError if `server_url` is not an http(s) URL with a host.
    """
    server = _server(server_url)
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    guards_used: dict[str, Guard] = {}  # only these: a document names the guards of its routes, no others
    endpoints_used: dict[str, Endpoint] = {}
    for route in routes_in_order():
        representation = route_representation(route)
        endpoints_used[route.endpoint.name] = route.endpoint
        guarded: dict[str, list[str]] = representation.get("guarded") or {}
        challenge = False
        for route_guard in route.guards.all() if guarded else ():
            guards_used[route_guard.guard.name] = route_guard.guard
            challenge = challenge or route_guard.guard.challenge_s > 0
        extension = {
            "route": route.name,
            "position": route.position,
            "endpoint": route.endpoint.name,
            "topic": route.topic,
            "filters": representation["filters"],
            "event-id": _FORM_OF_EVENT_ID.get(route.event_id, route.event_id),
            "start": route.start,
            "caught-up": route.caught_up,
            "slow-client": route.slow_client,
            "guarded": guarded,
        }
        messages = _messages(route.event_id, caught_up=route.caught_up, challenge=challenge)
        for index, condition in enumerate(route.conditions.all()):
            channel_id = _unique(route.name if index == 0 else f"{route.name}-{index}", channels)
            params = sorted(parse_path(condition.path).params)
            channel: dict[str, Any] = {
                "address": condition.path,
                "title": f"route {route.name}",
                "description": (
                    f"The messages of Kafka topic `{route.topic}`"
                    + (", filtered" if representation["filters"] else "")
                    + f", from {'the earliest retained' if route.start == START_HISTORICAL else 'the live end'}. "
                    + RESUME
                ),
                "messages": messages,
                EXTENSION: extension,
            }
            if params:
                channel["parameters"] = {
                    name: {"description": f"One path segment, percent-decoded: `{{{name}}}`."} for name in params
                }
            channels[channel_id] = channel
            operation: dict[str, Any] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{channel_id}"},
                "summary": f"Subscribe with EventSource to {condition.path}",
                "messages": [{"$ref": f"#/channels/{channel_id}/messages/{name}"} for name in messages],
                "bindings": {
                    "http": {"method": "GET", "query": _query(guarded=bool(guarded)), "bindingVersion": "0.3.0"}
                },
            }
            if guarded:
                operation["security"] = [{"$ref": f"#/components/securitySchemes/{name}"} for name in guarded]
                operation["description"] = _guards_description(guarded)
            operations[f"receive-{channel_id}"] = operation
    document: dict[str, Any] = {
        "asyncapi": "3.0.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Server-Sent Events streams of Kafka topics. " + RESUME,
        },
        "defaultContentType": "text/event-stream",
        "servers": {"platform": server},
        "channels": channels,
        "operations": operations,
    }
    if guards_used:
        document["components"] = {
            "securitySchemes": {name: _security_scheme(guard) for name, guard in sorted(guards_used.items())}
        }
    document[EXTENSION] = {
        "guards": {name: _guard_settings(guard) for name, guard in sorted(guards_used.items())},
        "endpoints": {
            name: {key: endpoint_representation(endpoint)[argument] for key, (argument, _, _) in _ENDPOINT_KEYS.items()}
            for name, endpoint in sorted(endpoints_used.items())
        },
    }
    return document


class _NoAliasDumper(yaml.SafeDumper):
    """Writes each shared object out in full: the import refuses aliases (see `_NoAliasLoader`)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(document: Mapping[str, Any]) -> str:
    """The document as YAML, keys in the order they were built, no aliases."""
    return yaml.dump(document, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)


def _server(server_url: str) -> dict[str, Any]:
    parts = urlsplit(server_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"{server_url!r} is not the platform's base URL: write http(s)://host[:port][/path].")
    server: dict[str, Any] = {
        "host": parts.netloc,
        "protocol": parts.scheme,
        "description": "The SSE platform: every channel address is a path under it, opened with GET (EventSource).",
    }
    if parts.path.rstrip("/"):
        server["pathname"] = parts.path.rstrip("/")
    return server


def _unique(name: str, taken: Mapping[str, Any]) -> str:
    """`name`, or `name-2`, `name-3`... if a channel has it (route `a` with two paths and a route `a-1`)."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def _sse_fields(event: str | None, event_id: str) -> dict[str, Any]:
    """The SSE fields sent before the `data:` lines, as the message's headers."""
    properties: dict[str, Any] = {
        "id": {
            "type": "string",
            "description": (KEY_AND_ETAG_ID if event_id == EVENT_ID_KEY_AND_ETAG else ETAG_ID) + " " + RESUME,
        }
    }
    if event is not None:
        properties["event"] = {"type": "string", "const": event}
    return {
        "type": "object",
        "description": "The SSE fields of the event (`id:`, `event:`), sent before its `data:` lines.",
        "properties": properties,
    }


def _messages(event_id: str, *, caught_up: bool, challenge: bool) -> dict[str, Any]:
    messages: dict[str, Any] = {
        "event": {
            "name": "event",
            "title": "A Kafka message",
            "summary": "An untyped event (`onmessage`): `data:` is the message value, one line per line of it.",
            "contentType": "text/event-stream",
            "headers": _sse_fields(None, event_id),
            "payload": {"type": "string", "description": "The Kafka message value, bytes passed through."},
        },
        "delete": {
            "name": "delete",
            "title": "A Kafka tombstone",
            "summary": "`event:delete`: the record with this key was deleted (its value is null).",
            "contentType": "text/event-stream",
            "headers": _sse_fields("delete", event_id),
            "payload": {
                "type": "string",
                "contentEncoding": "base64url",
                "description": "The base64url (padded) key of the deleted record; empty for a null key.",
            },
        },
        "reset": {
            "name": "reset",
            "title": "Data was missed",
            "summary": (
                "`event:reset`: a resumed offset is older than the earliest the topic still retains; the stream "
                "goes on from the earliest."
            ),
            "contentType": "application/json",
            "headers": _sse_fields("reset", event_id),
            "payload": {
                "type": "object",
                "required": ["partitions"],
                "properties": {
                    "partitions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["partition", "requested", "earliest"],
                            "properties": {
                                "partition": {"type": "integer"},
                                "requested": {"type": "integer", "description": "The offset the client asked for."},
                                "earliest": {"type": "integer", "description": "Where the stream goes on from."},
                            },
                        },
                    }
                },
            },
        },
    }
    if caught_up:
        messages["caught-up"] = {
            "name": "caught-up",
            "title": "History delivered",
            "summary": (
                "`event:caught-up`, once: every partition reached the live end of the topic as of subscribe time."
            ),
            "contentType": "text/event-stream",
            "headers": _sse_fields("caught-up", event_id),
            "payload": {"type": "string", "maxLength": 0},
        }
    if challenge:
        messages["challenge"] = {
            "name": "challenge",
            "title": "Send a fresh token",
            "summary": (
                "`event:challenge` before the token expires: POST to the stream's path with `content-type: "
                "application/x-challenge-response`, an empty body and a new `authorization: Bearer` token, or the "
                "stream closes when the token expires."
            ),
            "contentType": "application/json",
            "headers": {"type": "object", "properties": {"event": {"type": "string", "const": "challenge"}}},
            "payload": {
                "type": "object",
                "properties": {"method": {"const": "POST"}, "headers": {"type": "object"}},
            },
        }
    return messages


def _query(*, guarded: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "lastEventId": {"type": "string", "description": "Resume after this event id, if no Last-Event-ID header."},
        "since": {"type": "string", "description": "Start at this time instead: ISO-8601, or epoch milliseconds."},
    }
    if guarded:
        properties["access_token"] = {"type": "string", "description": "The JWT, if not in an authorization header."}
    return {"type": "object", "properties": properties}


def _guards_description(guarded: Mapping[str, list[str]]) -> str:
    parts = [
        f"`{name}` with roles {', '.join(f'`{role}`' for role in roles)}" if roles else f"`{name}` (any valid token)"
        for name, roles in guarded.items()
    ]
    return (
        "Guarded: every one of these guards must authorise the token, with all the roles listed: "
        + "; ".join(parts)
        + ". No or an invalid token: 401; a valid token without the roles: 403."
    )


def _guard_settings(guard: Guard) -> dict[str, Any]:
    """A guard as the document carries it: what verifying needs, public key members only."""
    settings = {key: guard_representation(guard)[argument] for key, (argument, _, _) in _GUARD_KEYS.items()}
    settings["keys"] = [
        {name: value for name, value in jwk.items() if name not in PRIVATE_JWK_MEMBERS}
        if isinstance(jwk, dict)
        else jwk
        for jwk in settings["keys"] or []
    ]
    return settings


def _security_scheme(guard: Guard) -> dict[str, Any]:
    where = "the `authorization: Bearer` header, else the `access_token` query parameter"
    if guard.cookie:
        where += f", else the `{guard.cookie}` cookie"
    return {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": (
            f"JWT guard `{guard.name}`: a token issued by `{guard.issuer}` for audience `{guard.audience}`, "
            f"in {where}. "
            f"Roles are read from the `{guard.roles_claim}` claim; each operation lists the roles it needs."
            + (
                f" A `challenge` event comes {guard.challenge_s} s before the token expires."
                if guard.challenge_s
                else " The stream closes when the token expires."
            )
        ),
    }


# Import


class AsyncApiImportError(ValueError):
    """A document that cannot be imported: `errors` maps where each problem is (`channels.<id>.<field>`)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{where}: {' '.join(messages)}" for where, messages in errors.items()))
        self.errors = errors


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


@dataclass
class ImportResult:
    """What an import wrote (or, with `dry_run`, would write), and the channels it left alone and why."""

    dry_run: bool
    routes: list[dict[str, Any]] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    ignored: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "routes": self.routes,
            "guards": self.guards,
            "endpoints": self.endpoints,
            "ignored": self.ignored,
        }


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without aliases: `*name` can make a document that refers to itself, or one that is tiny as text
    and huge as data, and an AsyncAPI document has no use for them."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted here", mark)
        return super().compose_node(parent, index)


def parse_document(text: str | bytes, *, is_json: bool = False) -> object:
    """A document from YAML (JSON is YAML too) or, with `is_json`, strict JSON; AsyncApiImportError naming
    `document` if it is neither."""
    try:
        if isinstance(text, bytes):
            text = text.decode()
        return json.loads(text) if is_json else yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        what = "JSON" if is_json else "YAML or JSON"
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise AsyncApiImportError({"document": [f"Not valid {what}: {reason}"]}) from None


def import_asyncapi(document: object, *, dry_run: bool = False, actor: Actor | None = None) -> ImportResult:
    """Create or replace a route for each SSE channel of an AsyncAPI 3 `document` (parsed YAML or JSON).

    All of it or nothing: raises AsyncApiImportError, having written nothing, if anything is wrong. With
    `dry_run` everything is validated and written inside a transaction that is then rolled back.
    """
    actor = actor or Actor(name="asyncapi import", source="import")
    errors: dict[str, list[str]] = {}
    result = ImportResult(dry_run=dry_run)
    routes, named = _plan(document, errors, result)
    if errors:
        raise AsyncApiImportError(errors)
    with transaction.atomic():
        for kind, put, written in (
            ("guards", do_put_guard, result.guards),
            ("endpoints", do_put_endpoint, result.endpoints),
        ):
            document_keys = {argument: key for key, (argument, _, _) in _NAMED[kind][1].items()}
            for name, arguments in named.get(kind, {}).items():
                try:
                    put(name=name, actor=actor, **arguments)
                except ValidationError as exc:
                    for key, messages in _message_dict(exc).items():
                        where = f"{EXTENSION}.{kind}.{name}"
                        document_key = document_keys.get(key)
                        errors.setdefault(f"{where}.{document_key}" if document_key else where, []).extend(messages)
                else:
                    written.append(name)
        for planned in routes:
            existed = Route.objects.filter(name=planned.name).exists()
            try:
                do_put_route(**planned.arguments, actor=actor)
            except ValidationError as exc:
                for key, messages in _message_dict(exc).items():
                    errors.setdefault(_where(planned, key), []).extend(messages)
            else:
                result.routes.append(
                    {
                        "name": planned.name,
                        "channels": planned.channels,
                        "paths": planned.arguments["paths"],
                        "topic": planned.arguments["topic"],
                        "status": "replaced" if existed else "created",
                    }
                )
        if errors:
            raise AsyncApiImportError(errors)  # leaves the atomic block: everything written is rolled back
        if dry_run:
            transaction.set_rollback(True)
    return result


def _message_dict(exc: ValidationError) -> dict[str, list[str]]:
    return exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}


def _where(planned: _PlannedRoute, key: str) -> str:
    """The place in the document of a `do_put_route` error key (`topic`, `paths[1]`, `filters[0].key`...)."""
    first = f"channels.{planned.channels[0]}"
    match = re.fullmatch(r"paths\[(\d+)\]", key)
    if match is not None and int(match.group(1)) < len(planned.channels):
        return f"channels.{planned.channels[int(match.group(1))]}.address"
    if key in ("paths", "path"):
        return f"{first}.address"
    argument, _, rest = key.partition(".")
    argument, bracket, index = argument.partition("[")
    document_key = _DOCUMENT_KEY.get(argument)
    if document_key is None or document_key not in planned.explicit:
        return first
    return f"{first}.{EXTENSION}.{document_key}{bracket}{index}" + (f".{rest}" if rest else "")


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
    document: object, errors: dict[str, list[str]], result: ImportResult
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
        found = _channel(document, channel_id, raw, servers=servers, secured=secured, errors=errors, result=result)
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
    result: ImportResult,
) -> tuple[str, dict[str, Any], set[str]] | None:
    """(address, do_put_route keywords, x-sse-kafka keys given) for an SSE channel; None if it is ignored
    (and listed so in `result`) or wrong (and the problem is in `errors`)."""
    where = f"channels.{channel_id}"
    channel = _resolve(document, raw)
    if not isinstance(channel, Mapping):
        if channel is None and isinstance(raw, Mapping) and "$ref" in raw:
            result.ignored.append({"channel": channel_id, "reason": f"$ref {raw['$ref']!r} is not in this document"})
        else:
            _add(errors, where, "A channel is an object.")
        return None
    reason = _not_sse(document, channel, servers, where, errors)
    if reason is not None:
        result.ignored.append({"channel": channel_id, "reason": reason})
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
    failed = False
    for key, value in extension.items():
        if key not in _ROUTE_KEYS:
            _add(errors, f"{where}.{key}", f"Unknown key: {EXTENSION} has {', '.join(_ROUTE_KEYS)}.")
            failed = True
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
    for unknown in sorted(set(extension) - set(_NAMED)):
        _add(errors, f"{EXTENSION}.{unknown}", f"Unknown key: {EXTENSION} has {', '.join(_NAMED)}.")
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
            for key, value in settings.items():
                if key not in keys:
                    _add(errors, f"{where}.{name}.{key}", f"Unknown key: a {singular} has {', '.join(keys)}.")
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
