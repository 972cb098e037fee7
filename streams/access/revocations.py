"""Revocations in a web process (docs/contract.md §6): tokens an operator revoked open no stream, and their open
streams end.

The process keeps the revocations in force in memory, two dicts keyed by (guard, identity) and (guard, jti), each
with its `until`, so checking a request costs two lookups and no query. A revocation past its `until` no longer
counts, whatever the dicts still hold: it lapses by itself, with no reload and no cleanup.

The dicts are read again from `bindings.selectors`:
- when a revocation is written: the change event (`bindings.changes`, heard on the Channels layer by every process);
  then every guarded stream the new set covers ends, with an `event:revoked` last (within moments);
- when the layer is heard again after an outage (messages may have been lost meanwhile);
- every `REFRESH_S` regardless, which bounds how long a process that missed an event serves a revoked token.

A process starts keeping them with its first guarded request. If they were never read and cannot be, a guarded
request is refused with a 503 rather than served unchecked; once read, the last set answers while Postgres is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import Mapping

from asgiref.sync import sync_to_async
from django.db import DatabaseError, close_old_connections

from bindings.changes import CHANGES_GROUP
from bindings.selectors import RevocationSpec, revocation_specs
from streams.access.guards import REVOKED_DETAIL, REVOKED_TITLE, REVOKED_TYPE, Grant
from streams.access.renewal import GuardedStream, Renewals
from streams.routes.listen import listen
from streams.telemetry.delivery_schema import End

log = logging.getLogger(__name__)

REFRESH_S = 10.0
# A request reads them itself only when the periodic read has not succeeded for this long (it keeps them fresher),
# and at most once per RETRY_S while Postgres cannot answer: requests never queue on a failing database.
STALE_S = 3 * REFRESH_S
RETRY_S = 1.0
REVOCATION_KIND = "revocation"  # the kind `bindings.services` announces revocations under
REVOKED_EVENT = (
    b"event:revoked\ndata:"
    + json.dumps({"type": REVOKED_TYPE, "title": REVOKED_TITLE, "status": 401, "detail": REVOKED_DETAIL}).encode()
    + b"\n\n"
)


def _read() -> tuple[RevocationSpec, ...]:
    close_old_connections()
    return revocation_specs()


class Revocations:
    """The revocations in force in this process, and the tasks that keep them current."""

    def __init__(self, renewals: Renewals) -> None:
        """`renewals`: the process's guarded streams, ended when a revocation covers them."""
        self.renewals = renewals
        self.identities: dict[tuple[str, str], float] = {}  # (guard, identity) -> until, epoch seconds
        self.tokens: dict[tuple[str, str], float] = {}  # (guard, jti) -> until
        self.loaded_at = float("-inf")  # loop time the last read started
        self.reloads = 0
        self.closed = 0  # streams ended by a revocation
        self._ended: weakref.WeakSet[GuardedStream] = weakref.WeakSet()
        self._loading: asyncio.Task[None] | None = None
        self._loading_since = float("-inf")
        self._failed_at = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False

    def covers(self, guard: str, grant: Grant) -> bool:
        """Whether a revocation in force refuses this token of `guard`."""
        now = time.time()
        if grant.identity is not None and self.identities.get((guard, grant.identity), 0.0) > now:
            return True
        return grant.token_id is not None and self.tokens.get((guard, grant.token_id), 0.0) > now

    def revoked(self, grants: Mapping[str, Grant]) -> bool:
        """Whether a revocation refuses any of a stream's tokens (by guard)."""
        return any(self.covers(guard, grant) for guard, grant in grants.items())

    async def fresh(self) -> None:
        """Before a guarded request is checked: the tasks that keep the set current started, and the set read if
        they have not managed to lately. Raises (a DatabaseError) only when it was never read and cannot be now."""
        loop = asyncio.get_running_loop()
        if not self._started:
            self._start()
        now = loop.time()
        if now - self.loaded_at > STALE_S and now - self._failed_at >= RETRY_S:
            try:
                await self.reload()
            except Exception as exc:
                self._failed_at = loop.time()
                if self.loaded_at == float("-inf"):
                    raise DatabaseError("the revocations cannot be read") from exc
                log.warning("revocations cannot be read; the last ones read still apply", exc_info=True)
        elif self.loaded_at == float("-inf"):  # never read, and the last try failed a moment ago
            raise DatabaseError("the revocations have not been read yet")

    def _start(self) -> None:
        self._started = True
        loop = asyncio.get_running_loop()
        for work, name in ((self._listen(), "revocations-listener"), (self._refresh(), "revocations-refresh")):
            task = loop.create_task(work, name=name)
            self._tasks.add(task)

    async def reload(self) -> None:
        """Read the revocations in force with a query started now or later (concurrent callers share one), then
        end the streams they cover."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        while True:
            task = self._loading
            if task is not None and self._loading_since >= asked:
                await asyncio.shield(task)
                return
            if task is not None and not task.done():
                with contextlib.suppress(Exception):  # its failure is its callers' to see
                    await asyncio.shield(task)  # an older query, maybe from before the change: read again after it
                continue
            self._loading_since = loop.time()
            self._loading = loop.create_task(self._load(self._loading_since), name="revocations-load")

    async def _load(self, started: float) -> None:
        specs = await sync_to_async(_read, thread_sensitive=False)()
        identities: dict[tuple[str, str], float] = {}
        tokens: dict[tuple[str, str], float] = {}
        for spec in specs:
            into, key = (identities, spec.identity) if spec.identity is not None else (tokens, spec.jti or "")
            into[spec.guard, key] = max(into.get((spec.guard, key), 0.0), spec.until)
        self.identities, self.tokens = identities, tokens
        self.loaded_at = started
        self.reloads += 1
        self.sweep()

    def sweep(self) -> None:
        """End every guarded stream a revocation in force covers; its client gets `event:revoked`, and its
        reconnect the 401 of a revoked token."""
        for stream in list(self.renewals.streams):
            if stream not in self._ended and self.revoked(stream.grants):
                self._ended.add(stream)
                self.closed += 1
                stream.end(End.REVOKED)

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception:
            log.warning("revocations cannot be read; retried within %s s", REFRESH_S, exc_info=True)

    def _reload_soon(self) -> None:
        """Back after an outage of the layer: read now, a revocation announced meanwhile was not heard."""
        task = asyncio.get_running_loop().create_task(self._reload_logged(), name="revocations-rejoin")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self) -> None:
        async def changed(message: dict[str, object]) -> None:
            if message.get("kind") == REVOCATION_KIND:
                await self._reload_logged()

        await listen(CHANGES_GROUP, changed, on_rejoin=self._reload_soon)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            await self._reload_logged()
