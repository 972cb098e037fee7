"""A guarded stream's token lease (docs/contract.md §6): the stream ends when the first of its tokens expires, and,
when a guard asks for it, the client is challenged for a new token that many seconds before. A challenge
response renews the tokens in place (streams/access/renewal.py), then `schedule()` re-arms the timer.

The lease talks to its stream only through the two callables it is given: `challenge()` and `end(reason)`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bindings.selectors import RouteSpec
from streams.access.guards import Grant
from streams.telemetry.delivery_schema import End


class Lease:
    def __init__(
        self,
        route: RouteSpec,
        grants: dict[str, Grant],
        *,
        challenge: Callable[[], None],
        end: Callable[[End], None],
    ) -> None:
        """`grants`: by guard, the tokens that authorised the stream (the stream's own dict, renewed in place)."""
        self.route = route
        self.grants = grants
        self._challenge = challenge
        self._end = end
        self.timer: asyncio.TimerHandle | None = None
        self.challenged_for: float | None = None  # the challenge time already sent for

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    @property
    def expires_at(self) -> float | None:
        """When the first of the stream's tokens expires (epoch seconds), or None."""
        times = [grant.expires_at for grant in self.grants.values() if grant.expires_at is not None]
        return min(times) if times else None

    def challenge_at(self, expires_at: float) -> float | None:
        """When to challenge the client for a new token: the earliest of its guards' `challenge` before expiry.
        Tokens without an identity are never challenged."""
        leads = [
            guard.challenge_s
            for guard, _ in self.route.guarded
            if guard.challenge_s and (grant := self.grants.get(guard.name)) and grant.identity is not None
        ]
        return expires_at - max(leads) if leads else None

    def schedule(self) -> None:
        """Arm the next timer: the challenge if one is due before expiry and not yet sent, else the expiry."""
        self.cancel()
        expires_at = self.expires_at
        if expires_at is None:
            return
        loop = asyncio.get_running_loop()
        now = time.time()
        challenge_at = self.challenge_at(expires_at)
        if challenge_at is not None and challenge_at != self.challenged_for:
            if challenge_at <= now:
                self.challenged_for = challenge_at
                self._challenge()
            else:
                self.timer = loop.call_at(loop.time() + challenge_at - now, self.schedule)
                return
        self.timer = loop.call_at(loop.time() + max(0.0, expires_at - now), self.expire)

    def expire(self) -> None:
        expires_at = self.expires_at
        if expires_at is not None and time.time() >= expires_at - 0.001:
            self._end(End.TOKEN_EXPIRED)
        else:  # renewed meanwhile
            self.schedule()
