"""Limits an operator sets on what one web process serves (docs/operations.md, "Limits").

- streams open at once: per process (`SSE_MAX_STREAMS`, a 503: another process or node may have room), per
  client address and per guard identity (`SSE_MAX_STREAMS_PER_CLIENT`, `SSE_MAX_STREAMS_PER_IDENTITY`, or the
  endpoint's own values; a 429), counted per endpoint;
- challenge responses per guard identity (or per client address, without a valid token) per minute (a 429).

An identity is a guard's and an identity claim's value together: two guards (two identity providers) that both
name a user "alice" name two users, each with a quota. A valid token without an identity claim counts as its own
identity (by its digest), so it is limited like any other rather than not at all.

A client address is counted as `client_key` gives it (streams/server/addresses.py): an IPv6 address by its prefix,
an IPv4-mapped one as IPv4.

Each refusal is a problem response with `retry-after`, counted in the metrics and the delivery log under its
reason. Counts are per process: with N workers behind one socket, a client may hold up to N times its limit.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from bindings.selectors import EndpointSpec, RouteSpec
from streams.access.guards import Grant
from streams.server.addresses import client_key

RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class LimitReached:
    """A refusal: the status, what the client reads, the reason counted, and when to retry."""

    status: int
    title: str
    detail: str
    reason: str
    retry_after_s: int

    @property
    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        return ((b"retry-after", str(self.retry_after_s).encode()),)


@dataclass(frozen=True)
class Ticket:
    """An admitted stream's place in the counts, given back when it ends."""

    client: tuple[str, ...]
    identity: tuple[str, ...] | None


class StreamLimits:
    def __init__(self) -> None:
        self.open = 0
        self.by_client: Counter[tuple[str, ...]] = Counter()
        self.by_identity: Counter[tuple[str, ...]] = Counter()  # (endpoint, guard, holder) -> streams

    def admit(self, endpoint: EndpointSpec, client: str, identity: tuple[str, str] | None) -> Ticket | LimitReached:
        """Count a stream about to open, or say which limit it would pass. `client`: its address; `identity`:
        (guard, holder), from `identity_of`."""
        retry = settings.SSE_LIMIT_RETRY_AFTER_S
        if settings.SSE_MAX_STREAMS and self.open >= settings.SSE_MAX_STREAMS:
            detail = f"This server holds its maximum of {settings.SSE_MAX_STREAMS} streams; retry in a moment."
            return LimitReached(503, "Server busy", detail, "max_streams", retry)
        per_client = _limit(endpoint.max_streams_per_client, settings.SSE_MAX_STREAMS_PER_CLIENT)
        by_client = (endpoint.name, client_key(client))
        if per_client and self.by_client[by_client] >= per_client:
            detail = f"This client address has {per_client} streams open on this endpoint, its maximum."
            return LimitReached(429, "Too many streams", detail, "max_streams_per_client", retry)
        per_identity = _limit(endpoint.max_streams_per_identity, settings.SSE_MAX_STREAMS_PER_IDENTITY)
        by_identity = None if identity is None else (endpoint.name, *identity)
        if identity is not None and per_identity and self.by_identity[(endpoint.name, *identity)] >= per_identity:
            guard, holder = identity
            whom = "identity" if holder.startswith("identity:") else "token (it has no identity)"
            detail = f"This {whom} of guard {guard!r} has {per_identity} streams open on this endpoint, its maximum."
            return LimitReached(429, "Too many streams", detail, "max_streams_per_identity", retry)
        self.open += 1
        self.by_client[by_client] += 1
        if by_identity is not None:
            self.by_identity[by_identity] += 1
        return Ticket(by_client, by_identity)

    def release(self, ticket: Ticket) -> None:
        self.open -= 1
        _decrement(self.by_client, ticket.client)
        if ticket.identity is not None:
            _decrement(self.by_identity, ticket.identity)


class RateLimit:
    """At most `settings.<name>` events per key in any RATE_WINDOW_S (a sliding window of timestamps).

    Keys are kept in the order of their last counted event (`seen`, oldest first). A key whose last event is a
    window old has nothing left to count: such keys are forgotten from the front, so a call does constant work
    amortised (a key is forgotten once for each time it was added) whatever the number of keys, and the keys kept
    are those of the last window.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: OrderedDict[str, deque[float]] = OrderedDict()

    def take(self, key: str, now: float | None = None) -> float:
        """Count one event for `key`; 0 if allowed, else the seconds until one would be."""
        limit: int = getattr(settings, self.name)
        if not limit:
            return 0.0
        now = time.monotonic() if now is None else now
        self._forget_idle(now)
        stamps = self.seen.get(key)
        if stamps is None:
            stamps = self.seen[key] = deque()
        while stamps and now - stamps[0] >= RATE_WINDOW_S:
            stamps.popleft()
        if len(stamps) >= limit:
            return RATE_WINDOW_S - (now - stamps[0])
        stamps.append(now)
        self.seen.move_to_end(key)  # keeps `seen` in the order of last events
        return 0.0

    def _forget_idle(self, now: float) -> None:
        seen = self.seen
        while seen:
            key, stamps = next(iter(seen.items()))
            if stamps and now - stamps[-1] < RATE_WINDOW_S:
                return  # the oldest last event is recent: so are all the others
            del seen[key]


def _limit(own: int | None, default: int) -> int:
    """An endpoint's own limit when it sets one (0: none), else the setting's."""
    return default if own is None else own


def _decrement(counter: Counter[tuple[str, ...]], key: tuple[str, ...]) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def identity_of(route: RouteSpec, grants: Mapping[str, Grant]) -> tuple[str, str] | None:
    """Whom a stream counts against: (guard, holder) of the first of the route's guards whose token names an
    identity, else of its first guard (the token then counts as its own identity); None on an unguarded route."""
    names = [guard.name for guard, _ in route.guarded if guard.name in grants]
    if not names:
        return None
    name = next((name for name in names if grants[name].identity), names[0])
    return name, grants[name].holder
