"""`/healthz` and `/readyz`, for load balancers and orchestrators.

`/healthz`: the process runs and its event loop answers. `/readyz`: it can serve streams: Postgres, Redis and
Kafka answer within `READY_TIMEOUT_S`, and the fetcher runs (its consumer process is not dying young again and
again). A 503 problem names what failed, so an operator reads the cause from the probe itself.

Streams that wait without the process being at fault are named too, under `waiting` (`waits`), without making
it unready: partitions whose records wait for a schema registry that cannot be reached (streams/kafka/decoding.py).
Every process of every node asks the same registry; taking them all out of a balancer would end every stream,
those of topics without schemas too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import redis
from django.conf import settings
from django.db import connection

from streams.edge.runtime import Runtime
from streams.hub.hub import Hub

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


def waits(hub: Hub | None) -> dict[str, str]:
    """What streams of the process of `hub` wait for though it is ready: "schema-registry" -> the waiting
    partitions and why, when records wait for their registry. Empty when nothing waits."""
    waiting = hub.fetcher.waiting if hub is not None else {}
    if not waiting:
        return {}
    topics = ", ".join(f"{topic}[{partition}]" for topic, partition in sorted(waiting))
    why = "; ".join(sorted(set(waiting.values())))
    return {"schema-registry": f"records of {topics} wait for their schema registry: {why}"}


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
