"""The slow-client policy: what a stream does while its client's connection is full (docs/data-plane.md).

Two bounds close a client, which then resumes from its Last-Event-ID with nothing lost:
- `close` (the route's default policy): a client that drained nothing for SSE_STALL_GRACE_MS while more than
  SSE_MAX_PENDING_BYTES behind, at once;
- whatever the policy: a client that does not catch up within SSE_CATCH_UP_S. When its connection fills, the
  stream notes what was pending for it then (the end of each partition's cache window, which the stream's
  position must reach) and when; the client has caught up once the stream's position has reached that mark while
  the connection had room. Until then it stays in the same slow spell, however often its connection takes a few
  bytes and fills again: a reader that takes a trickle, which restarted every other clock, holds no stream, no
  reader of history and no memory past the bound.

While it waits, a stream wakes only when its connection has room, or when a bound is due: no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from dataclasses import dataclass

from django.conf import settings

from streams.server.daphne import Flow
from streams.stream.reader import StreamReader
from streams.telemetry.counters import StreamStats

log = logging.getLogger(__name__)


class Drained(enum.Enum):
    """How a wait on a full connection ended."""

    WRITABLE = "writable"  # it has room again
    BEHIND = "behind"  # it has room again, and a conflating client sends only the latest per key next
    CLOSED = "closed"  # the client stayed full and fell too far behind, or did not catch up: it was closed


@dataclass(frozen=True)
class SlowSpell:
    """Since when a client has been behind, and the position (per partition) it must reach to be caught up."""

    since: float
    mark: dict[int, int]

    def caught_up(self, reader: StreamReader) -> bool:
        return all(reader.cursors.get(partition, 0) >= offset for partition, offset in self.mark.items())


class SlowClientPolicy:
    """The route's slow-client policy, applied while a client's connection is full. `close` (the default): wait,
    and close a client that has drained nothing for SSE_STALL_GRACE_MS and is more than SSE_MAX_PENDING_BYTES
    behind. `conflate`: wait, then send only the latest pending value per key. Both close a client that has not
    caught up within SSE_CATCH_UP_S."""

    # One per open stream: no dict of its own.
    __slots__ = ("catch_up_s", "conflate", "max_pending", "spell", "stall_grace_s", "stats")

    def __init__(self, *, conflate: bool, stats: StreamStats) -> None:
        self.conflate, self.stats = conflate, stats
        self.max_pending = settings.SSE_MAX_PENDING_BYTES
        self.stall_grace_s = settings.SSE_STALL_GRACE_MS / 1000
        self.catch_up_s = settings.SSE_CATCH_UP_S
        self.spell: SlowSpell | None = None

    async def wait(self, flow: Flow, reader: StreamReader) -> Drained:
        loop = asyncio.get_running_loop()
        paused_since = loop.time()
        if self.spell is None or self.spell.caught_up(reader):
            self.spell = SlowSpell(paused_since, reader.window_ends())
        give_up_at = self.spell.since + self.catch_up_s
        waited = False
        while flow.paused and not flow.closed:
            waited = True
            now = loop.time()
            if now >= give_up_at:
                log.info("closing a slow client of %s: not caught up in %d s", reader.topic, self.catch_up_s)
                return self._close(flow)
            wake_at = give_up_at
            if not self.conflate:
                # A pause alone is no stall (a replay fills the connection for a moment): close only a client that
                # has drained nothing for a while and is far behind. Looked at again every grace period while paused,
                # as records may arrive meanwhile.
                stalled_at = paused_since + self.stall_grace_s
                if now >= stalled_at:
                    if reader.lag_bytes() > self.max_pending:
                        log.info("closing a slow client of %s: over %d bytes behind", reader.topic, self.max_pending)
                        return self._close(flow)
                    stalled_at = now + max(self.stall_grace_s, 0.25)
                wake_at = min(wake_at, stalled_at)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(wake_at):
                    await flow.wait_writable()
        return Drained.BEHIND if self.conflate and waited else Drained.WRITABLE

    def _close(self, flow: Flow) -> Drained:
        self.stats.closed_slow += 1
        flow.abort()
        return Drained.CLOSED
