"""The SSE endpoint: a plain ASGI app in front of Django.

Paths under the reserved prefixes (admin, API, static, the demo page) go to Django; every other path is a
stream request, matched against the routes. A stream runs as one task, daphne's for the request: its pump runs
there until it ends, the client goes or `stop` resolves, and either of those ends it at once (race.py).
Before its response starts, `open_topic` (topics.py) finds the stream's topic and where it starts there, or the
problem it is refused with. Its other parts live beside it: HTTP helpers (http.py), requests that open no stream
(side_requests.py), the pump (streams/stream/pump.py), a guarded stream's token lease (streams/access/lease.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from bindings.selectors import SLOW_CLIENT_CONFLATE, RouteSpec
from config.logs import log_access, new_request_id, request_id
from streams.access.guards import Grant, Refusal, authorise
from streams.access.lease import Lease
from streams.access.renewal import CHALLENGE_EVENT
from streams.codecs import sse
from streams.codecs.asgi import ASGIApp, Receive, Scope, Send, header
from streams.edge.asks import AskError, Asks, stream_asks
from streams.edge.http import (
    MAX_LAST_EVENT_ID_BYTES,
    STREAM_HEADERS,
    cors_headers,
    last_event_id,
    problem,
    raw_path,
    refuse,
    respond_json,
    with_request_id,
)
from streams.edge.limits import LimitReached, Ticket, identity_of
from streams.edge.metrics import exposition
from streams.edge.race import race
from streams.edge.readiness import PROBES, Readiness
from streams.edge.runtime import Runtime
from streams.edge.runtime import runtime as process_runtime
from streams.edge.side_requests import side_request
from streams.edge.topics import RETRY_SOON, TopicProblem, open_topic
from streams.routes.matching import Match
from streams.server.daphne import FLOW_EXTENSION
from streams.stream.opening import stream_row
from streams.stream.pump import Pump
from streams.telemetry.delivery_log import StreamRow
from streams.telemetry.delivery_schema import End

log = logging.getLogger(__name__)


class StreamEndpoint:
    def __init__(self, django_app: ASGIApp, runtime: Runtime = process_runtime) -> None:
        self.django_app = django_app
        self.runtime = runtime
        self.readiness = Readiness(runtime)
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

    # An ASGI 3 application though `__call__` is no coroutine function (asgiref's mark, read by its
    # `guarantee_single_callable`): it returns what serves the request, and the task daphne runs it in holds no
    # frame of this method for as long as a stream lasts.
    _asgi_single_callable = True

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        if scope["type"] != "http":
            return with_id(None, self.django_app(scope, receive, send))
        # Every request's log records carry its id, and its response says it (config/logs.py): set where it is
        # served, in the context of the request's own task.
        given = new_request_id(header(scope, b"x-request-id"))
        send = with_request_id(send, given)
        if self._is_django(scope["path"]):
            return with_id(given, self.django_app(scope, receive, send))
        self.runtime.metrics.start()
        self.runtime.memory.start()
        if scope["path"].startswith("/-/") or scope["path"] in PROBES:
            return with_id(given, self.internal(scope, send))
        return Stream(scope, receive, send, self.runtime).run(given)

    async def internal(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/-/health":
            await respond_json(send, 200, self.runtime.health())
        elif scope["path"] == "/healthz":
            await respond_json(send, 200, {"status": "ok"})
        elif scope["path"] == "/metrics":
            await self.metrics(scope, send)
        elif scope["path"] == "/readyz":
            await self.readiness.respond(scope, send)
        else:
            await problem(send, 404, "Not found", f"Nothing at {scope['path']}.")

    async def metrics(self, scope: Scope, send: Send) -> None:
        """The Prometheus exposition of every worker; with `SSE_METRICS_TOKEN` set, for its bearer only."""
        token = settings.SSE_METRICS_TOKEN
        given = header(scope, b"authorization") or b""
        if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
            detail = "/metrics needs `Authorization: Bearer <SSE_METRICS_TOKEN>`."
            challenge = ((b"www-authenticate", b'Bearer realm="metrics"'),)
            await problem(send, 401, "Unauthorized", detail, headers=challenge)
            return
        self.runtime.metrics.sync()
        body, content_type = await asyncio.to_thread(exposition)
        headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def with_id(given: str | None, serving: Awaitable[None]) -> None:
    """Serve a request that is not a stream with its id set, if it has one (in its own task's context)."""
    if given is not None:
        request_id.set(given)
    await serving


RELEASED: Scope = {}  # a stream's scope once it let go of its request's (`Stream.start`): nothing to read


class Stream:
    """One SSE response: checks the request, resolves the route, then pumps Kafka records to the client."""

    # No dict of its own (held as long as its client); `__weakref__`: the revocations hold ended streams weakly.
    __slots__ = ("__weakref__", "cors", "counted", "grants", "lease", "path", "pump", "receive", "route", "runtime", "scope", "send", "stop")  # fmt: skip  # noqa: E501

    def __init__(self, scope: Scope, receive: Receive, send: Send, runtime: Runtime) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.runtime = runtime
        self.cors: tuple[tuple[bytes, bytes], ...] = ()
        self.stop: asyncio.Future[End] | None = None
        self.path = ""
        self.route: RouteSpec | None = None
        self.grants: dict[str, Grant] = {}  # by guard: the tokens that authorised this stream
        self.pump: Pump | None = None
        self.lease: Lease | None = None  # the expiry and challenge timers of a guarded stream
        self.counted = False  # among the streams opening (`opened`)

    async def problem(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        reason: str,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        **extra: Any,
    ) -> None:
        """A problem response, counted in the delivery log as a refusal for `reason`."""
        route = self.route.name if self.route is not None else ""
        self.runtime.refused(route, status, reason)
        await problem(self.send, status, title, detail, headers=(*headers, *self.cors), **extra)

    async def run(self, given_id: str) -> None:
        request_id.set(given_id)  # in the request's task: its context ends with it
        path = self.path = raw_path(self.scope)
        if await side_request(self.scope, self.receive, self.send, path, self.runtime):
            return
        first = await self.receive()
        if first["type"] == "http.disconnect":
            return
        if first.get("body") or first.get("more_body"):
            await self.problem(400, "Bad request", "A stream request has no body.", reason="body")
            return
        del first
        # Counted among the streams opening until its pump first rests, or its request ends (`Runtime.storming`).
        self.runtime.opening += 1
        self.counted = True
        try:
            # The checks' frame is gone once they are done: every frame a stream waits in is held while it runs.
            checked = await admit(self, path)
            if checked is None:
                return
            admitted, ticket = checked
            del checked
            try:
                # Set up in a frame of its own, gone once the stream streams: this frame is the one that waits.
                registration = await self.start(admitted, head_only=self.scope["method"] == "HEAD")
                del admitted
                if registration is None:
                    return
                pump, stop, topic = registration.pump, registration.stop, registration.row.topic
                end = End.SERVER_STOPPING  # unless the race below ends otherwise
                try:
                    registration.open()
                    pumping = pump.run(registration.route.endpoint.keepalive_s)
                    end = await race(pumping, stop, flow=pump.flow, receive=self.receive, send=self.send, topic=topic)
                finally:
                    registration.close(end)
                    await pump.close()
                    self.pump = None  # the pump's owner is this stream: freed without the collector
            finally:
                self.runtime.limits.release(ticket)
        finally:
            self.opened()

    async def start(self, admitted: Admitted, *, head_only: bool) -> Registration | None:
        """The stream's topic opened, its response started and its pump made: its registration, which `run` streams
        with, or None once the request is answered (a problem, or a HEAD's headers)."""
        matched, resume, asks = admitted.take()
        route = matched.route
        topic = await open_topic(self.runtime, matched, resume, asks)
        if isinstance(topic, TopicProblem):
            await self.problem(
                topic.status, topic.title, topic.detail, reason=topic.reason, headers=topic.headers, **topic.extra
            )
            return None
        state, opened = topic
        hub, delivery, sinks = self.runtime.hub(), self.runtime.delivery_log, self.runtime.deliveries
        await self.send({"type": "http.response.start", "status": 200, "headers": [*STREAM_HEADERS, *self.cors]})
        if head_only:
            await self.send({"type": "http.response.body", "body": b""})
            return None
        opening = sse.retry(route.endpoint.retry_ms) + opened.preamble
        await self.send({"type": "http.response.body", "body": opening, "more_body": True})
        flow = self.scope.get("extensions", {}).get(FLOW_EXTENSION)
        conflate = route.slow_client == SLOW_CLIENT_CONFLATE
        pump = Pump(
            hub, state, opened.subscription, opened.starts, send=self.send, flow=flow, conflate=conflate,
            label=route.name, stats=self.runtime.stats, log=sinks, owner=self,
        )  # fmt: skip
        self.stop = asyncio.get_running_loop().create_future()
        self.route, self.pump = route, pump
        registration = Registration(self, stream_row(delivery, self.scope, matched, self.path, opened=opened))
        # The stream lets go of the request's scope, its dicts and addresses (the access log's client is in the
        # registration).
        self.scope = RELEASED
        return registration

    def opened(self) -> None:
        """No longer among the streams opening: its pump first rested, or its request ended (once however often
        called)."""
        if self.counted:
            self.counted = False
            self.runtime.opening -= 1

    def topic_gone(self) -> None:
        """Its topic was deleted (the pump says): the client reconnects and gets a 404."""
        self.end(End.TOPIC_DELETED)

    def route_changed(self) -> None:
        """Its route changed or went (`OpenStreams.reconcile`): the client reconnects to what it is now."""
        self.end(End.ROUTE_CHANGED)

    def reauthorised(self) -> None:
        """A challenge response renewed one of this stream's tokens."""
        if self.lease is not None:
            self.lease.schedule()

    def challenge(self) -> None:
        """Ask the client for a new token, with the stream's next write."""
        if self.pump is not None:
            self.pump.inject(CHALLENGE_EVENT)

    def end(self, reason: End) -> None:
        """End the stream from outside (its route changed, its token expired); the client reconnects."""
        if self.stop is not None and not self.stop.done():
            log.debug("ending a stream: %s", reason)
            self.stop.set_result(reason)
            if self.pump is not None:
                self.pump.stop()


async def admit(stream: Stream, path: str) -> tuple[Admitted, Ticket] | None:
    """A stream request's checks, its route and its admission under the limits; None once a problem response went
    out. Its frame is gone before the stream serves."""
    resume = last_event_id(stream.scope)
    if resume is not None and len(resume) > MAX_LAST_EVENT_ID_BYTES:
        detail = f"Last-Event-ID is longer than {MAX_LAST_EVENT_ID_BYTES} bytes."
        await stream.problem(400, "Bad request", detail, reason="last_event_id")
        return None
    try:
        candidates = await stream.runtime.routes.candidates(path)
    except DatabaseError:  # and no table read before (streams/routes/table.py)
        detail = "The routes cannot be read now; retry in a moment."
        await stream.problem(503, "Routes unavailable", detail, reason="database", headers=RETRY_SOON)
        return None
    if not candidates:
        await stream.problem(404, "No route", f"No route matches {path}.", reason="no_route")
        return None
    stream.cors = cors_headers(candidates[0].route.endpoint, header(stream.scope, b"origin"))
    revocations = stream.runtime.revocations
    try:
        if any(candidate.route.guarded for candidate in candidates):
            await revocations.fresh()
    except DatabaseError:  # never read yet: a revoked token must not slip through
        detail = "The revoked tokens cannot be read now; retry in a moment."
        await stream.problem(503, "Revocations unavailable", detail, reason="database", headers=RETRY_SOON)
        return None
    authorised = await authorise(candidates, stream.scope, revocations.covers)
    if isinstance(authorised, Refusal):
        stream.runtime.refused(candidates[0].route.name, authorised.status, authorised.reason)
        await refuse(stream.send, authorised, stream.cors)
        return None
    matched = authorised.match
    stream.route = matched.route
    stream.cors = cors_headers(matched.route.endpoint, header(stream.scope, b"origin"))
    stream.grants = dict(authorised.grants)
    try:
        asks = stream_asks(stream.scope, matched.route)
    except AskError as exc:
        await stream.problem(400, "Bad request", str(exc), reason=exc.parameter, parameter=exc.parameter)
        return None
    client = str((stream.scope.get("client") or ("",))[0])
    ticket = stream.runtime.limits.admit(matched.route.endpoint, client, identity_of(matched.route, stream.grants))
    if isinstance(ticket, LimitReached):
        await stream.problem(ticket.status, ticket.title, ticket.detail, reason=ticket.reason, headers=ticket.headers)
        return None
    return Admitted(matched, resume, asks), ticket


class Admitted:
    """What a stream's checks found, handed to its serving, which takes it (`take`): the frame that checked, which
    lives as long as the stream, then holds none of it."""

    __slots__ = ("asks", "matched", "resume")

    def __init__(self, matched: Match, resume: bytes | None, asks: Asks) -> None:
        self.matched: Match | None = matched
        self.resume = resume
        self.asks: Asks | None = asks

    def take(self) -> tuple[Match, bytes | None, Asks]:
        matched, resume, asks = self.matched, self.resume, self.asks
        if matched is None or asks is None:
            raise RuntimeError("a stream's admission is taken once")
        self.matched = self.resume = self.asks = None
        return matched, resume, asks


class Registration:
    """A stream's entries in its process while it streams: the open-streams count and list (it is ended when
    its route changes), its grants (renewed by challenge responses) and their lease, and its row in
    the delivery log, from its opening row to its closing row with the totals."""

    # One per open stream: no dict of its own.
    __slots__ = ("client", "pump", "route", "row", "runtime", "stop", "stream")

    def __init__(self, stream: Stream, row: StreamRow) -> None:
        assert stream.route is not None  # noqa: S101  (registered once it serves)
        assert stream.pump is not None  # noqa: S101
        assert stream.stop is not None  # noqa: S101
        self.stream, self.route, self.row, self.pump, self.stop = stream, stream.route, row, stream.pump, stream.stop
        self.runtime = stream.runtime
        self.client = str((stream.scope.get("client") or ("",))[0])  # for the access log

    def open(self) -> None:
        stream, runtime, route = self.stream, self.runtime, self.route
        runtime.delivery_log.opened(self.row)
        runtime.opened(route.name, self.row.start)
        runtime.open_streams.add(stream, route, stream.path)
        if runtime.routes.changed_since(route, stream.path):  # changed while this stream was set up
            stream.end(End.ROUTE_CHANGED)
        if stream.grants:
            runtime.renewals.add(stream)
            if runtime.revocations.revoked(stream.grants):  # revoked while this stream was set up
                stream.end(End.REVOKED)
            stream.lease = Lease(route, stream.grants, challenge=stream.challenge, end=stream.end)
            stream.lease.schedule()

    def close(self, end: End) -> None:
        stream, runtime, row = self.stream, self.runtime, self.row
        runtime.closed(self.route.name, end)
        runtime.open_streams.remove(stream, self.route)
        runtime.renewals.remove(stream)
        if stream.lease is not None:
            stream.lease.cancel()
        if stream.pump is not None:
            pump = stream.pump
            row.events, row.bytes, row.replayed = pump.delivered, pump.written, pump.replayed
        runtime.delivery_log.closed(row, end)
        # daphne logs a response when it ends; a stream its client left never does: it gets its own line.
        log_access(
            method="GET", path=stream.path, status=200, bytes=row.bytes,  # a HEAD ends before it registers
            duration_ms=round((time.time() - row.opened_at) * 1000, 1), route=self.route.name,
            end=end.value, events=row.events, client=self.client,
        )  # fmt: skip
