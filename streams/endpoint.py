"""The SSE endpoint: a plain ASGI app in front of Django.

Paths under the reserved prefixes (admin, API, static, the demo page) go to Django; every other path is a
stream request, matched against the routes. A stream runs as two tasks, the Kafka pump and a watcher of the
client's `http.disconnect`; whichever ends first cancels the other, so a disconnect ends the stream at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from bindings.selectors import EVENT_ID_KEY_AND_ETAG, EndpointSpec, RouteSpec, route_specs
from streams import sse
from streams.event_id import OFFSET_EARLIEST, parse_id
from streams.filters import compile_filters
from streams.kafka import KafkaUnavailableError, ReaderStats, TopicNotFoundError, TopicReader
from streams.positions import Watermarks, parse_since, plan_start, since_offsets
from streams.routing import Match, compile_routes, match_path
from streams.subscription import Subscription, SubscriptionOptions

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

MAX_LAST_EVENT_ID_BYTES = 4096
STREAM_METHODS = "GET, HEAD, OPTIONS"
POLL_TIMEOUT_S = 0.1


class StreamStats:
    """Counters of this process (health endpoint, tests)."""

    open_streams = 0
    malformed_ids = 0


def _load_routes() -> tuple[RouteSpec, ...]:
    close_old_connections()
    return route_specs()


load_routes = sync_to_async(_load_routes)


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


def _header(scope: Scope, name: bytes) -> bytes | None:
    found = None
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            found = value  # the last one wins, as in Zilla
    return found


def last_event_id(scope: Scope) -> bytes | None:
    """The resume position: the Last-Event-ID header, else the `lastEventId` query parameter."""
    header = _header(scope, b"last-event-id")
    if header is not None:
        return header
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    values = query.get("lastEventId")
    return values[0].encode("utf-8") if values else None


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


class StreamEndpoint:
    def __init__(self, django_app: ASGIApp) -> None:
        self.django_app = django_app

    def _is_django(self, path: str) -> bool:
        return path == "/" or any(path.startswith(p) for p in settings.SSE_RESERVED_PREFIXES if p != "/-/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_django(scope["path"]):
            await self.django_app(scope, receive, send)
        elif scope["path"].startswith("/-/"):
            await self.internal(scope, send)
        else:
            await Stream(scope, receive, send).run()

    async def internal(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/-/health":
            body = {
                "status": "ok",
                "streams": StreamStats.open_streams,
                "kafka_readers": ReaderStats.open_readers,
                "malformed_ids": StreamStats.malformed_ids,
            }
            await respond_json(send, 200, body)
        else:
            await problem(send, 404, "Not found", f"Nothing at {scope['path']}.")


class Stream:
    """One SSE response: checks the request, resolves the route, then pumps Kafka records to the client."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.cors: tuple[tuple[bytes, bytes], ...] = ()

    async def problem(self, status: int, title: str, detail: str, **extra: Any) -> None:
        await problem(self.send, status, title, detail, headers=self.cors, **extra)

    async def run(self) -> None:
        method = self.scope["method"]
        path = raw_path(self.scope)
        if method == "OPTIONS":
            await self.preflight(path)
            return
        if method not in {"GET", "HEAD"}:
            await problem(
                self.send, 405, "Method not allowed", f"{method} is not allowed on a stream; use GET.",
                headers=((b"allow", STREAM_METHODS.encode()),),
            )  # fmt: skip
            return
        first = await self.receive()
        if first["type"] == "http.disconnect":
            return
        if first.get("body") or first.get("more_body"):
            await problem(self.send, 400, "Bad request", "A stream request has no body.")
            return
        resume = last_event_id(self.scope)
        if resume is not None and len(resume) > MAX_LAST_EVENT_ID_BYTES:
            await problem(
                self.send, 400, "Bad request", f"Last-Event-ID is longer than {MAX_LAST_EVENT_ID_BYTES} bytes."
            )
            return
        matched = match_path(compile_routes(await load_routes()), path)
        if matched is None:
            await problem(self.send, 404, "No route", f"No route matches {path}.")
            return
        self.cors = cors_headers(matched.route.endpoint, _header(self.scope, b"origin"))
        since_ms = None
        since_text = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("since")
        if since_text:
            try:
                since_ms = parse_since(since_text[0])
            except ValueError as exc:
                await self.problem(400, "Bad request", str(exc))
                return
        reader = TopicReader(settings.KAFKA, matched.topic)
        try:
            await self.serve(reader, matched, resume, since_ms, head_only=method == "HEAD")
        finally:
            await reader.close()

    async def preflight(self, path: str) -> None:
        matched = match_path(compile_routes(await load_routes()), path)
        if matched is None:
            await problem(self.send, 404, "No route", f"No route matches {path}.")
            return
        headers = [(b"allow", STREAM_METHODS.encode())]
        cors = cors_headers(matched.route.endpoint, _header(self.scope, b"origin"))
        if cors:
            requested = _header(self.scope, b"access-control-request-headers")
            headers += [*cors, (b"access-control-allow-methods", STREAM_METHODS.encode())]
            headers += [(b"access-control-max-age", b"600")]
            if requested:
                headers.append((b"access-control-allow-headers", requested))
        await self.send({"type": "http.response.start", "status": 204, "headers": headers})
        await self.send({"type": "http.response.body", "body": b""})

    async def serve(
        self, reader: TopicReader, matched: Match, resume: bytes | None, since_ms: int | None, *, head_only: bool
    ) -> None:
        route = matched.route
        try:
            subscription, offsets, preamble = await self.subscribe(reader, matched, resume, since_ms)
        except TopicNotFoundError as exc:
            await self.problem(404, "Unknown topic", str(exc), topic=exc.topic)
            return
        except KafkaUnavailableError as exc:
            log.warning("kafka unavailable for %s: %s", reader.topic, exc)
            await problem(
                self.send, 503, "Kafka unavailable", "The message broker cannot be reached; retry later.",
                headers=((b"retry-after", b"5"), *self.cors),
            )  # fmt: skip
            return
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.cors,
        ]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        if head_only:
            await self.send({"type": "http.response.body", "body": b""})
            return
        opening = sse.retry(route.endpoint.retry_ms) + preamble
        await self.send({"type": "http.response.body", "body": opening, "more_body": True})
        await reader.assign(offsets)
        StreamStats.open_streams += 1
        try:
            await self.race(reader, subscription, route.endpoint.keepalive_s)
        finally:
            StreamStats.open_streams -= 1

    async def subscribe(
        self, reader: TopicReader, matched: Match, resume: bytes | None, since_ms: int | None
    ) -> tuple[Subscription, dict[int, int], bytes]:
        """Where each partition starts, and the subscription that turns its records into events."""
        route: RouteSpec = matched.route
        info = await reader.open()
        marks = {p: Watermarks(low, high) for p, (low, high) in (await reader.watermarks(info.partitions)).items()}
        resumed = parse_id(resume.decode("utf-8", errors="replace")) if resume else None
        if resume and resumed is None:
            StreamStats.malformed_ids += 1
            log.info("malformed Last-Event-ID on %s, starting fresh: %r", route.name, resume[:100])
        since = None
        if since_ms is not None:
            since = since_offsets(await reader.offsets_for_time(info.partitions, since_ms), marks)
        plan = plan_start(marks, resumed=resumed, start=route.start, since=since)
        options = SubscriptionOptions(
            filters=compile_filters(route.filters, matched.params),
            key_form=route.event_id == EVENT_ID_KEY_AND_ETAG,
            compacted=info.compacted,
            caught_up=route.caught_up,
        )
        subscription = Subscription(
            plan.progress,
            ends={p: m.high for p, m in marks.items()},
            starts={p: marks[p].low if o == OFFSET_EARLIEST else o for p, o in plan.offsets.items()},
            options=options,
        )
        return subscription, plan.offsets, subscription.preamble(plan.resets)

    async def race(self, reader: TopicReader, subscription: Subscription, keepalive: int) -> None:
        pump = asyncio.create_task(self.pump(reader, subscription, keepalive), name=f"sse-pump:{reader.topic}")
        watcher = asyncio.create_task(self.wait_disconnect(), name="sse-disconnect")
        try:
            await asyncio.wait({pump, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, watcher):
                task.cancel()
            await asyncio.gather(pump, watcher, return_exceptions=True)
        if pump.done() and not pump.cancelled() and pump.exception() is not None:
            log.error("stream on %s failed", reader.topic, exc_info=pump.exception())
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def wait_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass

    async def pump(self, reader: TopicReader, subscription: Subscription, keepalive: int) -> None:
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        while True:
            batch = await reader.poll(POLL_TIMEOUT_S)
            chunk = subscription.feed(batch.records, batch.eof)
            if chunk:
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
                last_write = loop.time()
            elif keepalive and loop.time() - last_write >= keepalive:
                await self.send({"type": "http.response.body", "body": sse.KEEPALIVE, "more_body": True})
                last_write = loop.time()
