"""The SSE endpoint: a plain ASGI app in front of Django.

Paths under the reserved prefixes (admin, API, static, the demo page) go to Django; every other path is a
stream request, matched against the routes. A stream runs as two tasks, the Kafka pump and a watcher of the
client's `http.disconnect`; whichever ends first cancels the other, so a disconnect ends the stream at once.
Its parts live beside it: HTTP helpers (http.py), requests that open no stream (side_requests.py), the pump
(pump.py), a guarded stream's token lease (lease.py).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from typing import Any

from django.conf import settings

from bindings.patterns import TOPIC_NAME
from bindings.selectors import EVENT_ID_KEY_AND_ETAG, SLOW_CLIENT_CONFLATE, RouteSpec
from streams import sse
from streams.asgi import ASGIApp, Receive, Scope, Send, header, until_disconnect
from streams.event_id import parse_id
from streams.filters import compile_filters
from streams.guards import Refusal, Session, authorise
from streams.http import (
    MAX_LAST_EVENT_ID_BYTES,
    STREAM_HEADERS,
    STREAM_METHODS,
    cors_headers,
    last_event_id,
    problem,
    raw_path,
    refuse,
    respond_json,
    since_param,
)
from streams.hub import Hub, TopicState
from streams.kafka import KafkaUnavailableError, TopicNotFoundError
from streams.lease import Lease
from streams.pump import Pump
from streams.routing import Match
from streams.runtime import Runtime
from streams.runtime import runtime as process_runtime
from streams.server import FLOW_EXTENSION
from streams.sessions import CHALLENGE_CONTENT_TYPE, CHALLENGE_EVENT
from streams.side_requests import challenge_response, preflight
from streams.stats import StreamStats
from streams.subscription import Subscription, SubscriptionOptions

log = logging.getLogger(__name__)


class StreamEndpoint:
    def __init__(self, django_app: ASGIApp, runtime: Runtime = process_runtime) -> None:
        self.django_app = django_app
        self.runtime = runtime
        if settings.SSE_BOOTSTRAP_TOPICS:
            self._start_hub_when_serving()

    def _start_hub_when_serving(self) -> None:
        """Bootstrap topics are fetched from process start, not from the first stream: under daphne, start the
        hub as soon as the reactor runs (on its asyncio loop). Elsewhere the first request starts it."""
        reactor = sys.modules.get("twisted.internet.reactor")
        if reactor is not None:
            # Runs on the asyncio loop once it runs (startup triggers fire before).
            reactor.callLater(0, self.runtime.hub)

    def _is_django(self, path: str) -> bool:
        return path == "/" or any(path.startswith(p) for p in settings.SSE_RESERVED_PREFIXES if p != "/-/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_django(scope["path"]):
            await self.django_app(scope, receive, send)
        elif scope["path"].startswith("/-/"):
            await self.internal(scope, send)
        else:
            await Stream(scope, receive, send, self.runtime).run()

    async def internal(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/-/health":
            await respond_json(send, 200, self.runtime.health())
        else:
            await problem(send, 404, "Not found", f"Nothing at {scope['path']}.")


class Stream:
    """One SSE response: checks the request, resolves the route, then pumps Kafka records to the client."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, runtime: Runtime) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.runtime = runtime
        self.cors: tuple[tuple[bytes, bytes], ...] = ()
        self.stop: asyncio.Future[str] | None = None
        self.path = ""
        self.route: RouteSpec | None = None
        self.sessions: dict[str, Session] = {}  # by guard: the tokens that authorised this stream
        self.pump: Pump | None = None
        self.lease: Lease | None = None  # the expiry and challenge timers of a guarded stream

    async def problem(self, status: int, title: str, detail: str, **extra: Any) -> None:
        await problem(self.send, status, title, detail, headers=self.cors, **extra)

    async def run(self) -> None:
        method = self.scope["method"]
        path = self.path = raw_path(self.scope)
        if method == "OPTIONS":
            await preflight(self.scope, self.send, path, self.runtime.routes)
            return
        if method == "POST" and (header(self.scope, b"content-type") or b"").split(b";")[0].strip().lower() == (
            CHALLENGE_CONTENT_TYPE
        ):
            await challenge_response(self.scope, self.receive, self.send, path, self.runtime)
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
        candidates = await self.runtime.routes.candidates(path)
        if not candidates:
            await problem(self.send, 404, "No route", f"No route matches {path}.")
            return
        self.cors = cors_headers(candidates[0].route.endpoint, header(self.scope, b"origin"))
        authorised = await authorise(candidates, self.scope)
        if isinstance(authorised, Refusal):
            await refuse(self.send, authorised, self.cors)
            return
        matched = authorised.match
        self.cors = cors_headers(matched.route.endpoint, header(self.scope, b"origin"))
        self.sessions = dict(authorised.sessions)
        try:
            since_ms = since_param(self.scope)
        except ValueError as exc:
            await self.problem(400, "Bad request", str(exc))
            return
        await self.serve(matched, resume, since_ms, head_only=method == "HEAD")

    async def serve(self, matched: Match, resume: bytes | None, since_ms: int | None, *, head_only: bool) -> None:
        route = matched.route
        if not TOPIC_NAME.fullmatch(matched.topic):
            await self.problem(
                404, "Unknown topic", f"{matched.topic!r} is not a Kafka topic name.", topic=matched.topic
            )
            return
        hub = self.runtime.hub()
        try:
            state = await hub.topic(matched.topic)
            subscription, starts, preamble = await open_subscription(
                hub, state, matched, resume, since_ms, stats=self.runtime.stats
            )
        except TopicNotFoundError as exc:
            await self.problem(404, "Unknown topic", str(exc), topic=exc.topic)
            return
        except KafkaUnavailableError as exc:
            log.warning("kafka unavailable for %s: %s", matched.topic, exc)
            await problem(
                self.send, 503, "Kafka unavailable", "The message broker cannot be reached; retry later.",
                headers=((b"retry-after", b"5"), *self.cors),
            )  # fmt: skip
            return
        await self.send({"type": "http.response.start", "status": 200, "headers": [*STREAM_HEADERS, *self.cors]})
        if head_only:
            await self.send({"type": "http.response.body", "body": b""})
            return
        opening = sse.retry(route.endpoint.retry_ms) + preamble
        await self.send({"type": "http.response.body", "body": opening, "more_body": True})
        flow = self.scope.get("extensions", {}).get(FLOW_EXTENSION)
        conflate = route.slow_client == SLOW_CLIENT_CONFLATE
        pump = Pump(
            hub, state, subscription, starts,
            send=self.send, flow=flow, conflate=conflate, label=route.name, stats=self.runtime.stats,
        )  # fmt: skip
        self.stop = asyncio.get_running_loop().create_future()
        self.route, self.pump = route, pump
        self.runtime.stats.open_streams += 1
        try:
            self.runtime.open_streams.add(self, route, self.path, lambda: self.end("route changed"))
            if self.runtime.routes.changed_since(route, self.path):  # changed while this stream was set up
                self.end("route changed")
            if self.sessions:
                self.runtime.sessions.add(self)
                self.lease = Lease(route, self.sessions, challenge=self.challenge, end=self.end)
                self.lease.schedule()
            await self.race(pump.run(route.endpoint.keepalive_s), matched.topic, self.stop)
        finally:
            self.runtime.stats.open_streams -= 1
            self.runtime.open_streams.remove(self, route)
            self.runtime.sessions.remove(self)
            if self.lease is not None:
                self.lease.cancel()
            await pump.close()

    def reauthorised(self) -> None:
        """A challenge response renewed one of this stream's tokens."""
        if self.lease is not None:
            self.lease.schedule()

    def challenge(self) -> None:
        """Ask the client for a new token, with the stream's next write."""
        if self.pump is not None:
            self.pump.inject(CHALLENGE_EVENT)

    def end(self, reason: str) -> None:
        """End the stream from outside (its route changed, its token expired); the client reconnects."""
        if self.stop is not None and not self.stop.done():
            log.debug("ending a stream: %s", reason)
            self.stop.set_result(reason)
            if self.pump is not None:
                self.pump.stop()

    async def race(self, pump: Coroutine[Any, Any, None], topic: str, stop: asyncio.Future[str]) -> None:
        """The stream, the client's disconnect and `stop` race; whichever ends first cancels the others."""
        pumping = await until_disconnect(pump, self.receive, stop, name=f"sse-pump:{topic}")
        failed = pumping.done() and not pumping.cancelled() and pumping.exception() is not None
        if failed:
            log.error("stream on %s failed", topic, exc_info=pumping.exception())
        if failed or (stop.done() and not stop.cancelled()):
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})


async def open_subscription(
    hub: Hub, state: TopicState, matched: Match, resume: bytes | None, since_ms: int | None, *, stats: StreamStats
) -> tuple[Subscription, dict[int, int], bytes]:
    """Where each partition starts, and the subscription that turns its records into events."""
    route: RouteSpec = matched.route
    resumed = parse_id(resume.decode("utf-8", errors="replace")) if resume else None
    if resume and resumed is None:
        stats.malformed_ids += 1
        log.info("malformed Last-Event-ID on %s, starting fresh: %r", route.name, resume[:100])
    positions = await hub.positions(state, resumed=resumed, start=route.start, since_ms=since_ms)
    options = SubscriptionOptions(
        filters=compile_filters(route.filters, matched.params, matched.guarded),
        key_form=route.event_id == EVENT_ID_KEY_AND_ETAG,
        compacted=state.info.compacted,
        caught_up=route.caught_up,
    )
    subscription = Subscription(positions.plan.progress, ends=positions.ends, starts=positions.starts, options=options)
    return subscription, positions.starts, subscription.preamble(positions.plan.resets)
