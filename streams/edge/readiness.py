"""`/healthz` and `/readyz`, for load balancers and orchestrators.

`/healthz`: the process runs and its event loop answers. `/readyz`: it can serve streams: Postgres, Redis and
Kafka answer within `READY_TIMEOUT_S`, and the fetcher runs (its consumer process is not dying young again and
again). A 503 problem names which checks failed.

`/readyz` is open to anyone, and each check costs a Postgres connection, a Redis connection and a Kafka request,
so `Readiness` answers from a result at most `READY_MAX_AGE_S` old: one check runs at a time, shared by every
caller that arrives meanwhile, whatever the request rate. Anonymous callers learn only which checks failed; the
errors themselves (they name hosts and ports) go to the log when they change, and to a caller bearing
`SSE_METRICS_TOKEN`, the operator's credential for the process's own endpoints.

Streams that wait without the process being at fault are named too, under `waiting` (`waits`), without making
it unready: partitions whose records wait for a schema registry that cannot be reached (streams/kafka/decoding.py).
Every process of every node asks the same registry; taking them all out of a balancer would end every stream,
those of topics without schemas too. Anonymous callers see only that something waits.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable

import redis
from django.conf import settings
from django.db import connection

from streams.codecs.asgi import Scope, Send, header
from streams.edge.http import problem, respond_json
from streams.edge.runtime import Runtime
from streams.hub.hub import Hub

READY_TIMEOUT_S = 2.0
READY_MAX_AGE_S = 1.0  # a result younger than this answers /readyz without checking again
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})  # paths of the process's own, never a route
OK = "ok"
logger = logging.getLogger(__name__)


def _postgres() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        connection.close()  # a worker thread's connection, not kept


def _redis() -> None:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=READY_TIMEOUT_S, socket_connect_timeout=READY_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()


async def _in_thread(check: Callable[[], None]) -> None:
    await asyncio.wait_for(asyncio.to_thread(check), READY_TIMEOUT_S + 0.5)


def waits(hub: Hub | None) -> dict[str, str]:
    """What streams of the process of `hub` wait for though it is ready: "schema-registry" -> the waiting
    partitions and why, when records wait for their registry. Empty when nothing waits."""
    waiting = hub.fetcher.consumers.waiting if hub is not None else {}
    if not waiting:
        return {}
    topics = ", ".join(f"{topic}[{partition}]" for topic, partition in sorted(waiting))
    why = "; ".join(sorted(set(waiting.values())))
    return {"schema-registry": f"records of {topics} wait for their schema registry: {why}"}


async def checks(runtime: Runtime) -> dict[str, str]:
    """Each dependency -> "ok" or what went wrong."""
    hub = runtime.hub()

    async def fetcher() -> None:
        if not hub.fetcher.consumers.alive:
            raise RuntimeError("the fetcher thread has stopped: no stream of this process receives anything")

    probes: dict[str, Callable[[], Awaitable[None]]] = {
        "postgres": lambda: _in_thread(_postgres),
        "redis": lambda: _in_thread(_redis),
        "kafka": lambda: hub.metadata.reachable(READY_TIMEOUT_S),
        "fetcher": fetcher,
    }
    results = await asyncio.gather(*(probe() for probe in probes.values()), return_exceptions=True)
    return {
        name: "ok" if result is None else (str(result) or type(result).__name__)
        for name, result in zip(probes, results, strict=True)
    }


class Readiness:
    """`/readyz` for one process: checks shared by concurrent callers and reused for `READY_MAX_AGE_S`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._last: dict[str, str] | None = None
        self._checked_at = 0.0  # time.monotonic() when `_last` was found
        self._running: asyncio.Task[dict[str, str]] | None = None

    async def current(self) -> dict[str, str]:
        """Each check -> "ok" or its error: the last result if it is fresh, else the check running or a new one."""
        if self._last is not None and time.monotonic() - self._checked_at < READY_MAX_AGE_S:
            return self._last
        if self._running is None:
            self._running = asyncio.get_running_loop().create_task(self._check())
        # Shielded: a caller that goes away must not cancel the check the others wait for.
        return await asyncio.shield(self._running)

    async def _check(self) -> dict[str, str]:
        try:
            found = await checks(self.runtime)
        finally:
            self._running = None
        self._log_change(found)
        self._last, self._checked_at = found, time.monotonic()
        return found

    def _log_change(self, found: dict[str, str]) -> None:
        before = {name: result for name, result in (self._last or {}).items() if result != OK}
        failing = {name: result for name, result in found.items() if result != OK}
        if failing == before:
            return
        if failing:
            logger.warning("not ready: %s", "; ".join(f"{name}: {result}" for name, result in sorted(failing.items())))
        else:
            logger.info("ready again")

    async def respond(self, scope: Scope, send: Send) -> None:
        found = await self.current()
        failed = sorted(name for name, result in found.items() if result != OK)
        operator = is_operator(scope)
        waiting = waits(self.runtime.hub())
        if waiting and not operator:  # topic names and the registry's error are the operator's to read
            waiting = dict.fromkeys(waiting, "streams wait (the details are in the process's log)")
        extra = {"waiting": waiting} if waiting else {}
        if not failed:
            await respond_json(send, 200, {"status": "ready", "checks": found, **extra})
            return
        if operator:
            detail = "; ".join(f"{name}: {found[name]}" for name in failed)
            shown = found
        else:
            detail = f"Failed: {', '.join(failed)} (the errors are in the process's log)."
            shown = {name: OK if result == OK else "failed" for name, result in found.items()}
        await problem(
            send, 503, "Not ready", detail, headers=((b"retry-after", b"5"),), failed=failed, checks=shown, **extra
        )


def is_operator(scope: Scope) -> bool:
    """The request bears `SSE_METRICS_TOKEN` (never true while it is unset)."""
    token = settings.SSE_METRICS_TOKEN
    given = header(scope, b"authorization") or b""
    return bool(token) and hmac.compare_digest(given, f"Bearer {token}".encode())
