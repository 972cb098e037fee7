"""The routes as an AsyncAPI 3.0 document (see bindings/asyncapi/document.py for what a document holds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from bindings.asyncapi.payloads import RAW, Payloads
from bindings.asyncapi.schema import (
    _ENDPOINT_KEYS,
    _FORM_OF_EVENT_ID,
    _GUARD_KEYS,
    ETAG_ID,
    EXTENSION,
    KEY_AND_ETAG_ID,
    RESUME,
    _unique,
)
from bindings.documents import yaml_io
from bindings.models import (
    EVENT_ID_KEY_AND_ETAG,
    PRIVATE_JWK_MEMBERS,
    START_HISTORICAL,
    Endpoint,
    Guard,
    routes_in_order,
)
from bindings.patterns import parse_path
from bindings.representations import endpoint_representation, guard_representation, route_representation

# The problem a revoked token is refused with, as the data plane sends it (docs/contract.md §6); the control plane
# cannot import the data plane, so a test holds the two equal.
REVOKED_PROBLEM_TYPE = "urn:sse-kafka-platform:problem:token-revoked"
REVOKED_PROBLEM_TITLE = "Token revoked"


def export_asyncapi(server_url: str, *, title: str = "SSE over Kafka", version: str = "1.0.0") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every route, served at `server_url` (scheme://host[:port][/path]).

    Raises ValueError if `server_url` is not an http(s) URL with a host.
    """
    server = _server(server_url)
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    guards_used: dict[str, Guard] = {}  # only these: a document names the guards of its routes, no others
    endpoints_used: dict[str, Endpoint] = {}
    payloads = Payloads()
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
            "fields": list(route.fields),
            "conflate-ms": route.conflate_ms,
            "guarded": guarded,
        }
        messages = _messages(
            route.event_id,
            caught_up=route.caught_up,
            guarded=bool(guarded),
            challenge=challenge,
            value=payloads.value_payload(route.topic),
        )
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
                    "http": {
                        "method": "GET",
                        "query": _query(
                            guarded=bool(guarded), fields=list(route.fields), conflate_ms=route.conflate_ms
                        ),
                        "bindingVersion": "0.3.0",
                    }
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


def dump_yaml(document: Mapping[str, Any]) -> str:
    """The document as YAML, keys in the order they were built, no aliases."""
    return yaml_io.dump(document)


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


def _messages(
    event_id: str, *, caught_up: bool, guarded: bool, challenge: bool, value: tuple[dict[str, Any], str] = (RAW, "")
) -> dict[str, Any]:
    """The messages of a route's channels; `value` is the payload of its value events and their content type
    (`Payloads.value_payload`: the topic model's schema, when the document can carry it)."""
    payload, content_type = value
    messages: dict[str, Any] = {
        "event": {
            "name": "event",
            "title": "A Kafka message",
            "summary": "An untyped event (`onmessage`): `data:` is the message value, one line per line of it.",
            "contentType": content_type or "text/event-stream",
            "headers": _sse_fields(None, event_id),
            "payload": payload,
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
    messages["patch"] = {
        "name": "patch",
        "title": "A change of a key's value",
        "summary": (
            "`event:patch`, only with `?delta=merge-patch`: an RFC 7396 JSON Merge Patch from the value this stream "
            "last sent for the event id's key to the record's value. The event id always takes the key form."
        ),
        "contentType": "application/merge-patch+json",
        "headers": _sse_fields("patch", EVENT_ID_KEY_AND_ETAG),
        "payload": {"type": "object", "description": "Applied to the key's last value, it gives the record's."},
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
    if guarded:
        messages["revoked"] = _revoked_message()
    return messages


def _revoked_message() -> dict[str, Any]:
    """The last event of a guarded stream whose token an operator revoked (docs/contract.md §6)."""
    return {
        "name": "revoked",
        "title": "The token was revoked",
        "summary": (
            "`event:revoked`, last: an operator revoked the token or its identity and the stream closes. Do not "
            "reconnect with the same token (the request is refused with this problem as a 401): sign in again."
        ),
        "contentType": "application/problem+json",
        "headers": {"type": "object", "properties": {"event": {"type": "string", "const": "revoked"}}},
        "payload": {
            "type": "object",
            "description": "An RFC 9457 problem, the body a new request with the same token is refused with.",
            "required": ["type", "title", "status", "detail"],
            "properties": {
                "type": {"const": REVOKED_PROBLEM_TYPE},
                "title": {"const": REVOKED_PROBLEM_TITLE},
                "status": {"const": 401},
                "detail": {"type": "string"},
            },
        },
    }


def _query(*, guarded: bool, fields: list[str], conflate_ms: int) -> dict[str, Any]:
    """The query parameters a route's stream takes, the shaping ones (docs/contract.md §7) with its bounds."""
    properties: dict[str, Any] = {
        "lastEventId": {"type": "string", "description": "Resume after this event id, if no Last-Event-ID header."},
        "since": {"type": "string", "description": "Start at this time instead: ISO-8601, or epoch milliseconds."},
        "fields": {
            "type": "string",
            "description": (
                "Keep only these parts of each JSON value: JSON Pointers, comma-separated or the parameter repeated"
                + (f"; each one of the route's: {', '.join(f'`{field}`' for field in fields)}" if fields else "")
                + ". Anything else is a 400."
            ),
        },
        "conflate_ms": {
            "type": "integer",
            "minimum": conflate_ms,
            "description": (
                "At most one event per key per this many milliseconds, the key's latest value"
                + (f"; at least the route's {conflate_ms}" if conflate_ms else "")
                + "."
            ),
        },
        "delta": {
            "type": "string",
            "enum": ["merge-patch"],
            "description": "Per key, the first value whole, then `event:patch` events (RFC 7396) when shorter.",
        },
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
        + ". No or an invalid token: 401; a revoked token: 401 with problem type "
        + f"`{REVOKED_PROBLEM_TYPE}`; a valid token without the roles: 403."
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
