"""How a stream opens: where each partition starts, the subscription that turns records into its events, and
the record of it the delivery log keeps."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bindings.selectors import EVENT_ID_KEY_AND_ETAG, RouteSpec
from streams.codecs.asgi import Scope, header
from streams.codecs.event_id import parse_id
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.hub.hub import Hub
from streams.hub.topic_state import TopicState
from streams.routes.filters import compile_filters
from streams.routes.matching import Match
from streams.routes.projection import projection
from streams.telemetry.counters import StreamStats
from streams.telemetry.delivery_log import DeliveryLog, StreamRow, user_agent_family
from streams.telemetry.delivery_schema import Start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shaping:
    """What a stream sends of each record, from its route and what its request asked (streams/edge/asks.py)."""

    fields: tuple[str, ...] = ()  # JSON Pointers: the parts of each value sent; none: all of it
    conflate_ms: int = 0  # at most one event per key per interval (0: every event)
    delta: str = ""  # "merge-patch": a key's value whole once, then patches when shorter (key-form ids)


@dataclass(frozen=True)
class Opened:
    """A stream's subscription, where each partition starts, what it sends first, and how it started."""

    subscription: Subscription
    starts: dict[int, int]
    preamble: bytes
    start: Start
    resets: int


async def open_subscription(
    hub: Hub,
    state: TopicState,
    matched: Match,
    resume: bytes | None,
    since_ms: int | None,
    *,
    stats: StreamStats,
    log_batches: bool = False,
    shaping: Shaping = Shaping(),  # frozen: one shared default is safe
) -> Opened:
    """Where each partition starts, and the subscription that turns its records into events."""
    route: RouteSpec = matched.route
    resumed = parse_id(resume.decode("utf-8", errors="replace")) if resume else None
    if resume and resumed is None:
        stats.malformed_ids += 1
        log.info("malformed Last-Event-ID on %s, starting fresh: %r", route.name, resume[:100])
    positions = await hub.positions(state, resumed=resumed, start=route.start, since_ms=since_ms)
    options = SubscriptionOptions(
        filters=compile_filters(route.filters, matched.params, matched.guarded),
        key_form=route.event_id == EVENT_ID_KEY_AND_ETAG or bool(shaping.delta),  # a patch's id names its key
        compacted=state.info.compacted,
        caught_up=route.caught_up,
        projection=projection(shaping.fields),
        conflate_ms=shaping.conflate_ms,
        deltas=bool(shaping.delta),
    )
    subscription = Subscription(
        positions.plan.progress, ends=positions.ends, starts=positions.starts, options=options, log_batches=log_batches
    )
    resets = positions.plan.resets
    if resumed is not None:
        start = Start.RESUMED
    elif resume:
        start = Start.MALFORMED
    else:
        start = Start.SINCE if since_ms is not None else Start.FRESH
    return Opened(subscription, positions.starts, subscription.preamble(resets), start, len(resets))


def stream_row(delivery: DeliveryLog, scope: Scope, matched: Match, path: str, *, opened: Opened) -> StreamRow:
    """The delivery log's row of a stream: identities and addresses only as keyed hashes."""
    identity = guarded_identity(matched)
    client = scope.get("client") or ("", 0)
    return StreamRow(
        route=matched.route.name,
        endpoint=matched.route.endpoint.name,
        topic=matched.topic,
        path=path,
        identity=None if identity is None else delivery.keyed_hash(identity),
        client=delivery.keyed_hash(str(client[0])),
        user_agent=user_agent_family((header(scope, b"user-agent") or b"").decode("latin-1")),
        start=opened.start,
        resets=opened.resets,
    )


def guarded_identity(matched: Match) -> str | None:
    """The identity a guard found in the stream's token, if any."""
    return next((found["identity"] for found in matched.guarded.values() if found.get("identity")), None)
