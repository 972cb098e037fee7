"""HTTP pieces of the stream endpoint: JSON and problem responses, CORS headers, the resume id and the raw path
of a request (docs/contract.md §2, §4)."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs

from bindings.selectors import EndpointSpec
from streams.access.guards import REVOKED_TITLE, REVOKED_TYPE, Refusal
from streams.codecs.asgi import Scope, Send, header
from streams.events.start_plan import parse_since

# A revoked token's 401 says so, apart from other 401s (docs/contract.md §6): a client must not retry it.
MAX_LAST_EVENT_ID_BYTES = 4096
STREAM_METHODS = "GET, HEAD, OPTIONS"
# A stream's response headers (docs/contract.md §2): proxies must neither cache nor buffer it.
STREAM_HEADERS = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


async def respond_json(
    send: Send, status: int, body: dict[str, Any], *, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    payload = json.dumps(body).encode()
    content_type = b"application/problem+json" if status >= 400 else b"application/json"  # noqa: PLR2004
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def problem(
    send: Send, status: int, title: str, detail: str, *, headers: tuple[tuple[bytes, bytes], ...] = (), **extra: Any
) -> None:
    """An RFC 9457 problem response."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    await respond_json(send, status, body, headers=headers)


def last_event_id(scope: Scope) -> bytes | None:
    """The resume position: the Last-Event-ID header, else the `lastEventId` query parameter."""
    found = header(scope, b"last-event-id")
    if found is not None:
        return found
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    values = query.get("lastEventId")
    return values[0].encode("utf-8") if values else None


def since_param(scope: Scope) -> int | None:
    """The `since` query parameter as epoch milliseconds (docs/contract.md §5); ValueError says what is wrong."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("since")
    return parse_since(values[0]) if values else None


def cors_headers(endpoint: EndpointSpec, origin: bytes | None) -> tuple[tuple[bytes, bytes], ...]:
    """CORS response headers for an allowed `origin`; none for others (the browser then blocks the read)."""
    if origin is None or not endpoint.cors_origins:
        return ()
    text = origin.decode("latin-1")
    wildcard = "*" in endpoint.cors_origins
    if wildcard and not endpoint.cors_credentials:
        allowed = b"*"
    elif wildcard or text in endpoint.cors_origins:
        allowed = origin
    else:
        return ()
    headers = [(b"access-control-allow-origin", allowed), (b"vary", b"origin")]
    if endpoint.cors_credentials:
        headers.append((b"access-control-allow-credentials", b"true"))
    return tuple(headers)


def raw_path(scope: Scope) -> str:
    raw = scope.get("raw_path")
    if raw:
        return bytes(raw).split(b"?", 1)[0].decode("latin-1")
    return str(scope["path"])


async def refuse(send: Send, refusal: Refusal, cors: tuple[tuple[bytes, bytes], ...]) -> None:
    """A guard's refusal: 401 (with `www-authenticate`), 403, or 503 when keys cannot be fetched."""
    headers = cors
    if refusal.status == 401:  # noqa: PLR2004
        challenge = b'Bearer realm="sse"' + (b', error="invalid_token"' if refusal.token_given else b"")
        if refusal.revoked:
            challenge += b', error_description="The token was revoked"'
        headers = ((b"www-authenticate", challenge), *headers)
    titles = {401: "Unauthorized", 403: "Forbidden", 503: "Service unavailable"}
    if refusal.status == 503:  # noqa: PLR2004
        headers = ((b"retry-after", b"5"), *headers)
    if refusal.revoked:
        body = {"type": REVOKED_TYPE, "title": REVOKED_TITLE, "status": 401, "detail": refusal.detail}
        await respond_json(send, 401, body, headers=headers)
        return
    await problem(send, refusal.status, titles[refusal.status], refusal.detail, headers=headers)


def with_request_id(send: Send, given: str) -> Send:
    """`send`, adding `x-request-id` to the response's headers."""
    return RequestIdSend(send, given.encode("ascii"))


class RequestIdSend:
    """`send` adding `x-request-id` to the response's headers: an object with slots, not a closure, as every open
    stream holds one (a function, its cell and its closure were 400 bytes)."""

    __slots__ = ("send", "value")

    def __init__(self, send: Send, value: bytes) -> None:
        self.send, self.value = send, value

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", self.value)]}
        await self.send(message)
