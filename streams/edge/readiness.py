"""`/healthz` and `/readyz`, for load balancers and orchestrators.

`/healthz`: the process runs and its event loop answers. `/readyz`: it can serve streams: Postgres, Redis and
Kafka answer within `READY_TIMEOUT_S`, and the fetcher runs (its consumer process is not dying young again and
again). A 503 problem names what failed, so an operator reads the cause from the probe itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import redis
from django.conf import settings
from django.db import connection

from streams.edge.runtime import Runtime

READY_TIMEOUT_S = 2.0
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})  # paths of the process's own, never a route


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


async def checks(runtime: Runtime) -> dict[str, str]:
    """Each dependency -> "ok" or what went wrong."""
    hub = runtime.hub()

    async def fetcher() -> None:
        if not hub.fetcher.thread.alive:
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
