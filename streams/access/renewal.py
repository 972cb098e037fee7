"""Continuous authorisation (docs/contract.md §6): guarded streams end when their token does, unless renewed.

A guard with `challenge: N` has each stream sent an `event:challenge` N seconds before its token expires. The
client answers with a POST to any stream path, `content-type: application/x-challenge-response`, and a new
token; the answer is always 204. The token is broadcast on the Channels layer, so every web process hears it:
each verifies it with the guards of its open streams, and a valid token with the same identity, whose roles
still satisfy a stream's route, extends that stream. Tokens without an identity are never challenged.

The broadcast carries the token sealed (Fernet: AES-CBC and an HMAC) with a key derived from `SECRET_KEY`, never
in clear: Redis, its persistence files and whoever reads its traffic hold a bearer token otherwise, good for any
stream until it expires. Every web process shares `SECRET_KEY`; a process also opens what was sealed with one of
`SECRET_KEY_FALLBACKS`, so a rotation renews across processes that have and have not restarted yet. A broadcast
that opens with none of them (not ours, or tampered with) renews nothing.

A renewal extends a stream only if it gives the same value for every attribute the stream's topic and filters
read: the stream was opened for those values, and rendering its templates anew mid-stream would mix two
selections in one event sequence. Such a renewal is ignored for that stream, which ends when its old token
expires; the client reconnects with the new token and is served what the new values select.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Protocol

from channels.layers import get_channel_layer
from cryptography.fernet import Fernet, MultiFernet
from cryptography.fernet import InvalidToken as UnreadableSeal
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from bindings.selectors import GuardSpec, RouteSpec
from streams.access.guards import Grant, route_guard_values, verifiers
from streams.routes.listen import listen
from streams.telemetry.delivery_schema import End

log = logging.getLogger(__name__)

REAUTHORIZE_GROUP = "streams.reauthorize"
# How long a broadcast may wait on Redis: one that does not answer (a partition rather than a refusal) would hold a
# renewal past the old token's expiry, as the layer's connections have no timeout of their own.
BROADCAST_TIMEOUT_S = 1.0
CHALLENGE_CONTENT_TYPE = b"application/x-challenge-response"
CHALLENGE_EVENT = (
    b'event:challenge\ndata:{"method":"POST","headers":{"content-type":"application/x-challenge-response"}}\n\n'
)


SEAL_PURPOSE = b"sse-platform: challenge response broadcast"  # this key opens nothing else derived from SECRET_KEY


@functools.lru_cache(maxsize=8)
def _fernet(secret: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_PURPOSE).derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _sealer() -> MultiFernet:
    """Seals with SECRET_KEY; opens what SECRET_KEY or one of its fallbacks sealed."""
    return MultiFernet([_fernet(secret) for secret in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS)])


def seal(token: str) -> str:
    """A token as the broadcast carries it: readable only with a key derived from SECRET_KEY."""
    return _sealer().encrypt(token.encode()).decode("ascii")


def unseal(sealed: str) -> str | None:
    """The token a broadcast carries, or None if none of our keys opens it."""
    try:
        return _sealer().decrypt(sealed.encode("ascii")).decode()
    except (UnreadableSeal, UnicodeError):
        return None


class GuardedStream(Protocol):
    route: RouteSpec | None
    grants: dict[str, Grant]

    def reauthorised(self) -> None: ...

    def end(self, reason: End) -> None: ...


def changes(old: Grant, new: Grant, reads: set[str]) -> list[str]:
    """Which of the values `reads` (`identity`, `attributes.<name>`) the new token gives otherwise than the old."""
    before, after = old.values(), new.values()
    return sorted(value for value in reads if before.get(value) != after.get(value))


class Renewals:
    """The guarded streams of this process, and the listener that renews them."""

    def __init__(self) -> None:
        self.streams: set[GuardedStream] = set()
        self.renewed = 0
        self._listener: asyncio.Task[None] | None = None
        # Whether the listener has lost the group and not joined it again: a broadcast would not reach this process.
        self._deaf = False
        # Whether an operator revoked a token of a guard (streams/access/revocations.py): such a token renews nothing.
        self.is_revoked: Callable[[str, Grant], bool] = lambda guard, grant: False

    def add(self, stream: GuardedStream) -> None:
        self.streams.add(stream)
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="sse-reauthorize")

    def remove(self, stream: GuardedStream) -> None:
        self.streams.discard(stream)

    async def reauthorize(self, token: str) -> None:
        """Extend every stream this token renews: same identity, the route's roles, a later expiry."""
        guards: dict[GuardSpec, Grant | None] = {}
        for stream in self.streams:
            for guard, _ in stream.route.guarded if stream.route else ():
                guards.setdefault(guard, None)
        for guard in guards:
            with contextlib.suppress(Exception):  # not this guard's token, or its keys cannot be read now
                guards[guard] = await verifiers.get(guard).verify(token)
        for stream in list(self.streams):
            renewed = False
            reads = route_guard_values(stream.route) if stream.route else set()
            for guard, roles in stream.route.guarded if stream.route else ():
                new, old = guards.get(guard), stream.grants.get(guard.name)
                if new is None or old is None or new.identity is None or new.identity != old.identity:
                    continue
                if new.roles is None or not set(roles) <= new.roles or self.is_revoked(guard.name, new):
                    continue
                if changed := changes(old, new, {value for name, value in reads if name == guard.name}):
                    log.info("a renewal changes %s, which the stream reads: not extended", changed)
                    continue
                if old.expires_at is not None and (new.expires_at is None or new.expires_at > old.expires_at):
                    stream.grants[guard.name] = new
                    renewed = True
            if renewed:
                self.renewed += 1
                stream.reauthorised()

    async def _listen(self) -> None:
        async def heard(message: dict[str, object]) -> None:
            sealed = message.get("sealed")
            if not isinstance(sealed, str) or not self.streams:
                return
            token = unseal(sealed)
            if token is None:
                log.warning("a renewal broadcast that none of our keys opens is ignored (another SECRET_KEY?)")
                return
            await self.reauthorize(token)

        def lost() -> None:
            self._deaf = True

        def joined() -> None:
            self._deaf = False

        await listen(REAUTHORIZE_GROUP, heard, on_error=lost, on_rejoin=joined)

    async def broadcast(self, token: str) -> None:
        """Hand a challenge response's token to every process (this one included). If the layer cannot take it
        within BROADCAST_TIMEOUT_S, or this process's listener has not joined the group again since Redis came
        back, renew this process's streams here: a renewal heard twice extends nothing more."""
        layer = get_channel_layer()
        if layer is None:
            await self.reauthorize(token)
            return
        try:
            message = {"type": "streams.reauthorize", "sealed": seal(token)}
            await asyncio.wait_for(layer.group_send(REAUTHORIZE_GROUP, message), BROADCAST_TIMEOUT_S)
        except Exception:
            log.warning("could not broadcast a challenge response; renewing this process's streams only", exc_info=True)
            await self.reauthorize(token)
            return
        if self._deaf:
            await self.reauthorize(token)
