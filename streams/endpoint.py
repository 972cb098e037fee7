"""The SSE endpoint: a plain ASGI app in front of Django.

Paths under the reserved prefixes (admin, API, static, the demo page) go to Django; every other path is a
stream request, matched against the routes. A stream runs as two tasks, the Kafka pump and a watcher of the
client's `http.disconnect`; whichever ends first cancels the other, so a disconnect ends the stream at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Coroutine, Hashable
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from bindings.patterns import TOPIC_NAME
from bindings.selectors import EVENT_ID_KEY_AND_ETAG, SLOW_CLIENT_CONFLATE, EndpointSpec, RouteSpec
from streams import sse
from streams.asgi import ASGIApp, Receive, Scope, Send, header
from streams.event_id import parse_id
from streams.filters import compile_filters
from streams.guards import Refusal, Session, accepted_by_any, authorise, credentials
from streams.hub import Hub, TopicState, current_hub, get_hub
from streams.kafka import HistoricalReader, KafkaUnavailableError, ReaderStats, Record, TopicNotFoundError
from streams.positions import parse_since
from streams.routes import open_streams, route_table
from streams.routing import Match
from streams.server import FLOW_EXTENSION, Flow
from streams.sessions import CHALLENGE_CONTENT_TYPE, CHALLENGE_EVENT, broadcast, sessions
from streams.subscription import Subscription, SubscriptionOptions

log = logging.getLogger(__name__)


MAX_LAST_EVENT_ID_BYTES = 4096
STREAM_METHODS = "GET, HEAD, OPTIONS"
HISTORY_POLL_S = 0.05
CHUNK_BYTES = 256 * 1024  # at most this much per write, so no connection's buffer holds more


class StreamStats:
    """Counters of this process (health endpoint, tests)."""

    open_streams = 0
    malformed_ids = 0
    closed_slow = 0


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
        if settings.SSE_BOOTSTRAP_TOPICS:
            self._start_hub_when_serving()

    @staticmethod
    def _start_hub_when_serving() -> None:
        """Bootstrap topics are fetched from process start, not from the first stream: under daphne, start the
        hub as soon as the reactor runs (on its asyncio loop). Elsewhere the first request starts it."""
        reactor = sys.modules.get("twisted.internet.reactor")
        if reactor is not None:
            reactor.callLater(0, get_hub)  # runs on the asyncio loop once it runs (startup triggers fire before)

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
            hub = current_hub()
            counts = hub.stats() if hub else {"kafka_consumers": 0, "fetch_streams": 0, "subscriptions": 0}
            counts.setdefault("stalled_streams", 0)
            counts.setdefault("stalls_noticed", 0)
            counts["kafka_consumers"] += ReaderStats.historical_readers
            body = {
                "status": "ok",
                "streams": StreamStats.open_streams,
                "malformed_ids": StreamStats.malformed_ids,
                "closed_slow": StreamStats.closed_slow,
                "historical_readers": ReaderStats.historical_readers,
                "route_reloads": route_table.reloads,
                "closed_on_change": open_streams.closed,
                "renewed_by_challenge": sessions.renewed,
                **counts,
            }
            await respond_json(send, 200, body)
        else:
            await problem(send, 404, "Not found", f"Nothing at {scope['path']}.")


class Stream:
    """One SSE response: checks the request, resolves the route, then pumps Kafka records to the client."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.cors: tuple[tuple[bytes, bytes], ...] = ()
        self.stop: asyncio.Future[str] | None = None
        self.path = ""
        self.route: RouteSpec | None = None
        self.sessions: dict[str, Session] = {}  # by guard: the tokens that authorised this stream
        self.pump: Pump | None = None
        self.auth_timer: asyncio.TimerHandle | None = None
        self.challenged_for: float | None = None  # the challenge time already sent for

    async def problem(self, status: int, title: str, detail: str, **extra: Any) -> None:
        await problem(self.send, status, title, detail, headers=self.cors, **extra)

    async def run(self) -> None:
        method = self.scope["method"]
        path = self.path = raw_path(self.scope)
        if method == "OPTIONS":
            await self.preflight(path)
            return
        if method == "POST" and (header(self.scope, b"content-type") or b"").split(b";")[0].strip().lower() == (
            CHALLENGE_CONTENT_TYPE
        ):
            await self.challenge_response(path)
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
        candidates = await route_table.candidates(path)
        if not candidates:
            await problem(self.send, 404, "No route", f"No route matches {path}.")
            return
        self.cors = cors_headers(candidates[0].route.endpoint, header(self.scope, b"origin"))
        authorised = await authorise(candidates, self.scope)
        if isinstance(authorised, Refusal):
            await self.refuse(authorised)
            return
        matched = authorised.match
        self.cors = cors_headers(matched.route.endpoint, header(self.scope, b"origin"))
        self.sessions = dict(authorised.sessions)
        since_ms = None
        since_text = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("since")
        if since_text:
            try:
                since_ms = parse_since(since_text[0])
            except ValueError as exc:
                await self.problem(400, "Bad request", str(exc))
                return
        await self.serve(matched, resume, since_ms, head_only=method == "HEAD")

    async def challenge_response(self, path: str) -> None:
        """A client's answer to a `challenge` event: always 204; its token renews matching streams everywhere."""
        try:
            matched = await route_table.match(path)
        except Exception:
            log.warning("challenge response: routes cannot be read", exc_info=True)
            matched = None
        if matched is not None:
            self.cors = cors_headers(matched.route.endpoint, header(self.scope, b"origin"))
        while True:  # the body is empty by contract; read it to the end whatever it is
            message = await self.receive()
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await self.send({"type": "http.response.start", "status": 204, "headers": list(self.cors)})
        await self.send({"type": "http.response.body", "body": b""})
        token = credentials(self.scope)
        # Only a token one of our guards accepts goes to every process: garbage stays here.
        if token is not None and await accepted_by_any(route_table.guards(), token):
            await broadcast(token)

    async def refuse(self, refusal: Refusal) -> None:
        headers = self.cors
        if refusal.status == 401:  # noqa: PLR2004
            challenge = b'Bearer realm="sse"' + (b', error="invalid_token"' if refusal.token_given else b"")
            headers = ((b"www-authenticate", challenge), *headers)
        titles = {401: "Unauthorized", 403: "Forbidden", 503: "Service unavailable"}
        if refusal.status == 503:  # noqa: PLR2004
            headers = ((b"retry-after", b"5"), *headers)
        title = titles[refusal.status]
        await problem(self.send, refusal.status, title, refusal.detail, headers=headers)

    async def preflight(self, path: str) -> None:
        matched = await route_table.match(path)
        if matched is None:
            await problem(self.send, 404, "No route", f"No route matches {path}.")
            return
        headers = [(b"allow", STREAM_METHODS.encode())]
        cors = cors_headers(matched.route.endpoint, header(self.scope, b"origin"))
        if cors:
            requested = header(self.scope, b"access-control-request-headers")
            headers += [*cors, (b"access-control-allow-methods", b"GET, HEAD, OPTIONS, POST")]
            headers += [(b"access-control-max-age", b"600")]
            if requested:
                headers.append((b"access-control-allow-headers", requested))
        await self.send({"type": "http.response.start", "status": 204, "headers": headers})
        await self.send({"type": "http.response.body", "body": b""})

    async def serve(self, matched: Match, resume: bytes | None, since_ms: int | None, *, head_only: bool) -> None:
        route = matched.route
        if not TOPIC_NAME.fullmatch(matched.topic):
            await self.problem(
                404, "Unknown topic", f"{matched.topic!r} is not a Kafka topic name.", topic=matched.topic
            )
            return
        hub = get_hub()
        try:
            state = await hub.topic(matched.topic)
            subscription, starts, preamble = await self.subscribe(hub, state, matched, resume, since_ms)
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
        flow = self.scope.get("extensions", {}).get(FLOW_EXTENSION)
        conflate = route.slow_client == SLOW_CLIENT_CONFLATE
        pump = Pump(hub, state, subscription, starts, send=self.send, flow=flow, conflate=conflate, label=route.name)
        self.stop = asyncio.get_running_loop().create_future()
        self.route, self.pump = route, pump
        StreamStats.open_streams += 1
        try:
            open_streams.add(self, route, self.path, lambda: self.end("route changed"))
            if route_table.changed_since(route, self.path):  # changed while this stream was set up
                self.end("route changed")
            if self.sessions:
                sessions.add(self)
                self.schedule_authorisation()
            await self.race(pump.run(route.endpoint.keepalive_s), matched.topic, self.stop)
        finally:
            StreamStats.open_streams -= 1
            open_streams.remove(self, route)
            sessions.remove(self)
            if self.auth_timer is not None:
                self.auth_timer.cancel()
            await pump.close()

    @property
    def expires_at(self) -> float | None:
        """When the first of this stream's tokens expires (epoch seconds), or None."""
        times = [session.expires_at for session in self.sessions.values() if session.expires_at is not None]
        return min(times) if times else None

    def challenge_at(self, expires_at: float) -> float | None:
        """When to challenge the client for a new token: the earliest of its guards' `challenge` before expiry.
        Tokens without an identity are never challenged."""
        assert self.route is not None  # noqa: S101
        leads = [
            guard.challenge_s
            for guard, _ in self.route.guarded
            if guard.challenge_s and (session := self.sessions.get(guard.name)) and session.identity is not None
        ]
        return expires_at - max(leads) if leads else None

    def schedule_authorisation(self) -> None:
        """Arm the next timer: the challenge if one is due before expiry and not yet sent, else the expiry."""
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        expires_at = self.expires_at
        if expires_at is None:
            return
        loop = asyncio.get_running_loop()
        now = time.time()
        challenge_at = self.challenge_at(expires_at)
        if challenge_at is not None and challenge_at != self.challenged_for:
            if challenge_at <= now:
                self.challenged_for = challenge_at
                if self.pump is not None:
                    self.pump.inject(CHALLENGE_EVENT)
            else:
                self.auth_timer = loop.call_at(loop.time() + challenge_at - now, self.schedule_authorisation)
                return
        self.auth_timer = loop.call_at(loop.time() + max(0.0, expires_at - now), self.expire)

    def expire(self) -> None:
        expires_at = self.expires_at
        if expires_at is not None and time.time() >= expires_at - 0.001:
            self.end("token expired")
        else:  # renewed meanwhile
            self.schedule_authorisation()

    def reauthorised(self) -> None:
        """A challenge response renewed one of this stream's tokens."""
        self.schedule_authorisation()

    def end(self, reason: str) -> None:
        """End the stream from outside (its route changed, its token expired); the client reconnects."""
        if self.stop is not None and not self.stop.done():
            log.debug("ending a stream: %s", reason)
            self.stop.set_result(reason)
            if self.pump is not None:
                self.pump.stopped = True  # nothing more goes out, not even from the hub's direct writes

    async def subscribe(
        self, hub: Hub, state: TopicState, matched: Match, resume: bytes | None, since_ms: int | None
    ) -> tuple[Subscription, dict[int, int], bytes]:
        """Where each partition starts, and the subscription that turns its records into events."""
        route: RouteSpec = matched.route
        resumed = parse_id(resume.decode("utf-8", errors="replace")) if resume else None
        if resume and resumed is None:
            StreamStats.malformed_ids += 1
            log.info("malformed Last-Event-ID on %s, starting fresh: %r", route.name, resume[:100])
        positions = await hub.positions(state, resumed=resumed, start=route.start, since_ms=since_ms)
        options = SubscriptionOptions(
            filters=compile_filters(route.filters, matched.params, matched.guarded),
            key_form=route.event_id == EVENT_ID_KEY_AND_ETAG,
            compacted=state.info.compacted,
            caught_up=route.caught_up,
        )
        subscription = Subscription(
            positions.plan.progress, ends=positions.ends, starts=positions.starts, options=options
        )
        return subscription, positions.starts, subscription.preamble(positions.plan.resets)

    async def race(self, pump: Coroutine[Any, Any, None], topic: str, stop: asyncio.Future[str]) -> None:
        """The stream, the client's disconnect and `stop` race; whichever ends first cancels the others."""
        pumping = asyncio.create_task(pump, name=f"sse-pump:{topic}")
        watcher = asyncio.create_task(self.wait_disconnect(), name="sse-disconnect")
        try:
            racers: set[asyncio.Future[Any]] = {pumping, watcher, stop}
            await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pumping, watcher):
                task.cancel()
            stop.cancel()
            await asyncio.gather(pumping, watcher, return_exceptions=True)
        failed = pumping.done() and not pumping.cancelled() and pumping.exception() is not None
        if failed:
            log.error("stream on %s failed", topic, exc_info=pumping.exception())
        if failed or (stop.done() and not stop.cancelled()):
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def wait_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass


class Pump:
    """Moves one stream's records from the cache (or, for what it no longer holds, a historical reader) to the
    client: everything ready goes out in one write. A full connection is not written to; then, by the route's
    slow-client policy, the client is closed once more than SSE_MAX_PENDING_BYTES behind (it resumes with
    nothing lost), or, conflating, it is sent only the latest pending value per key when it drains."""

    def __init__(
        self,
        hub: Hub,
        state: TopicState,
        subscription: Subscription,
        starts: dict[int, int],
        *,
        send: Send,
        flow: Flow | None,
        conflate: bool = False,
        label: str = "",
    ) -> None:
        self.hub, self.state, self.subscription = hub, state, subscription
        self.label = label  # the route, for logs
        self.cursors = dict(starts)  # next offset to read, per partition
        self.send, self.flow = send, flow
        self.conflate = conflate
        self.behind = False  # conflating: the connection was full, so the next read conflates what is pending
        self.waiter = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.idle = False  # the task is parked waiting: `notify` may write
        self.shared_delivered = 0
        self.shared_pending = False
        self.keepalive = 0
        self.keepalive_due = False
        self.last_write = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        self.history: HistoricalReader | None = None
        self.max_pending = settings.SSE_MAX_PENDING_BYTES
        self.stall_grace_s = settings.SSE_STALL_GRACE_MS / 1000
        self.backlog: list[Record] = []  # records from the historical reader not written yet
        self.history_partitions: set[int] = set()
        self.injected = b""
        self.stopped = False
        self.state = hub.attach(state, starts, self)

    def inject(self, data: bytes) -> None:
        """Send `data` (an event of the stream's own, such as a challenge) with the next write."""
        self.injected += data
        self.waiter.set()

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.hub.detach(self.state, self)
        await self.close_history()

    async def close_history(self) -> None:
        """Close the historical reader, if any; it is let go first, so a cancelled close is never repeated."""
        history, self.history, self.backlog = self.history, None, []
        if history is not None:
            await history.close()

    def receiving(self) -> bool:
        """The client takes what is written: the stream goes on and its connection is not full."""
        flow = self.flow
        return not self.stopped and (flow is None or not (flow.paused or flow.closed))

    async def write(self, data: bytes) -> None:
        if self.stopped:
            return
        if self.flow is not None:
            self.flow.write(data)
        else:
            await self.send({"type": "http.response.body", "body": data, "more_body": True})
        self.last_write = self.loop.time()

    def share_key(self) -> Hashable | None:
        """Pumps with equal keys write the same bytes for the next batch (None: this one cannot share now)."""
        flow = self.flow
        if (
            not self.idle
            or flow is None
            or flow.paused
            or flow.closed
            or self.injected
            or self.stopped
            or not self.subscription.settled
        ):
            return None
        return (
            self.subscription.options,
            tuple(self.cursors.items()),
            tuple(self.subscription.progress.items()),
        )

    def notify(self) -> bytes | None:
        """The hub's fan-out: while the task is parked and the connection has room, write here and now (no task
        switch per client per batch); anything else is the task's to do. Returns what it wrote."""
        flow = self.flow
        if not self.idle or flow is None or flow.paused or flow.closed or self.injected or self.stopped:
            self.waiter.set()
            return None
        before = self.subscription.delivered
        data = self.read_cache()
        if data:
            flow.write(data)
            self.last_write = self.loop.time()
        self.shared_pending = self.pending()
        if self.shared_pending or flow.paused:
            self.waiter.set()
        self.shared_delivered = self.subscription.delivered - before
        return data

    def adopt(self, leader: Pump, data: bytes) -> None:
        """Write what `leader`, whose share key equals this one's, just wrote, and take its position."""
        assert self.flow is not None  # noqa: S101  (share_key is None without a flow)
        self.cursors = dict(leader.cursors)
        self.subscription.adopt(leader.subscription, leader.shared_delivered)
        if data:
            self.flow.write(data)
            self.last_write = leader.last_write
        if leader.shared_pending or self.flow.paused:
            self.waiter.set()

    def _keepalive(self) -> None:
        if self.stopped:
            return
        idle_for = self.loop.time() - self.last_write
        if idle_for >= self.keepalive:
            if self.idle and self.flow is not None and not self.flow.paused:
                self.flow.write(sse.KEEPALIVE)
                self.last_write = self.loop.time()
            else:
                self.keepalive_due = True
                self.waiter.set()
        self.timer = self.loop.call_at(self.last_write + self.keepalive, self._keepalive)

    async def run(self, keepalive: int) -> None:
        self.keepalive = keepalive
        if keepalive:
            self.timer = self.loop.call_at(self.last_write + keepalive, self._keepalive)
        while True:
            self.waiter.clear()
            if not await self.writable():
                return
            data = await self.read_history() + self.read_cache()
            if self.injected:
                data, self.injected = self.injected + data, b""
            if self.keepalive_due and not data:
                data = sse.KEEPALIVE
            self.keepalive_due = False
            if data:
                await self.write(data)
            if self.history is not None or self.backlog or self.pending() or (self.flow and self.flow.paused):
                await asyncio.sleep(0)
                continue
            self.idle = True
            try:
                await self.waiter.wait()
            finally:
                self.idle = False

    def pending(self) -> bool:
        """Records are ready in the window, or a partition fell behind it (eviction overtook a slow reader, whose
        task must then read that part from Kafka)."""
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is None:
                continue
            if cursor < window.start or (cursor < window.next_offset and window.read(cursor, 1)):
                return True
        return False

    async def writable(self) -> bool:
        """Wait while the client's connection is full; False (and the connection closed) once it is too far
        behind."""
        flow = self.flow
        paused_since = asyncio.get_running_loop().time()
        while flow is not None and flow.paused and not flow.closed:
            if self.conflate:
                self.behind = True
                await flow.wait_writable()
                continue
            # A pause alone is no stall (a replay fills the connection for a moment): close only a client that
            # has drained nothing for a while and is far behind.
            stalled = asyncio.get_running_loop().time() - paused_since >= self.stall_grace_s
            if stalled and self.lag_bytes() > self.max_pending:
                StreamStats.closed_slow += 1
                log.info("closing a slow client of %s: more than %d bytes behind", self.state.name, self.max_pending)
                flow.abort()
                return False
            try:
                await asyncio.wait_for(flow.wait_writable(), 0.25)
            except TimeoutError:
                continue
        return True

    def lag_bytes(self) -> int:
        total = 0
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None:
                total += window.lag_bytes(max(cursor, window.start))
        return total

    def read_cache(self) -> bytes:
        records = []
        eof = []
        conflate, self.behind = self.behind, False
        budget = CHUNK_BYTES
        for partition in self.cursors:
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None and conflate and self.cursors[partition] < window.start:
                # Conflating skips what the window no longer holds: a key updated only before it is not resent.
                self.cursors[partition] = window.start
            cursor = self.cursors[partition]
            if window is None or cursor < window.start:
                continue
            got = window.read(cursor, len(window)) if conflate else self._within_budget(window.read(cursor), budget)
            if got:
                records.extend(got)
                budget -= sum(record.size for record in got)
                self.cursors[partition] = got[-1].offset + 1
            elif partition in self.state.at_end:
                eof.append(partition)
        return self.subscription.feed(records, eof, conflate=conflate) if records or eof else b""

    @staticmethod
    def _within_budget(records: list[Record], budget: int) -> list[Record]:
        """The first records whose sizes fit in `budget` (at least one, so a big record still goes out), as a new
        list: callers remove what they took from `records`."""
        total = 0
        for index, record in enumerate(records):
            total += record.size
            if total > budget:
                return records[: max(index, 1)] if budget > 0 else []
        return records[:]

    async def read_history(self) -> bytes:
        """Records older than the cache window, from a short-lived reader that hands over to the window."""
        if self.behind:
            return b""  # a conflating client that fell behind skips to the window instead
        behind = {}
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None and cursor < window.start:
                behind[partition] = cursor
        if not behind:
            await self.close_history()
            return b""
        if self.history is not None and not behind.keys() <= self.history_partitions:
            # Eviction put another partition behind the window: read it too, from where each one stands.
            await self.close_history()
        if self.history is None:
            self.history = HistoricalReader(self.hub.kafka, self.state.name)
            self.history_partitions = set(behind)
            await self.history.start(behind)
        if not self.backlog:
            self.backlog = (await self.history.poll(HISTORY_POLL_S)).records
        records = self._within_budget(self.backlog, CHUNK_BYTES)
        del self.backlog[: len(records)]
        records = [r for r in records if r.partition in behind and r.offset >= self.cursors[r.partition]]
        for record in records:
            self.cursors[record.partition] = record.offset + 1
        return self.subscription.feed(records) if records else b""
