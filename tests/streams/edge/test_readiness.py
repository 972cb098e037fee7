"""/healthz and /readyz: liveness, and readiness that names what failed, against the real services and a broker
whose line the test cuts; the errors themselves only for the operator's token; and a flood of /readyz costs one
check at a time, counted as connections to Redis through a proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.conf import settings

from streams.edge.readiness import checks
from streams.edge.runtime import Runtime
from streams.hub.hub import Hub
from tests.conftest import wait_until
from tests.support.inprocess import LoopThread
from tests.support.servers import DaphneServer, KafkaCluster, TcpProxy, kafka_behind_proxy, start_daphne

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_live_process_answers_healthz_and_a_ready_one_readyz(daphne_url: str) -> None:
    assert httpx.get(f"{daphne_url}/healthz", timeout=5).json() == {"status": "ok"}
    ready = httpx.get(f"{daphne_url}/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"postgres": "ok", "redis": "ok", "kafka": "ok", "fetcher": "ok"},
    }
    assert httpx.get(f"{daphne_url}/-/health", timeout=5).json()["status"] == "ok"


OPERATOR_TOKEN = "readiness-test-operator-token"


@pytest.fixture
def behind_a_cuttable_line() -> Iterator[tuple[DaphneServer, KafkaCluster, TcpProxy]]:
    with kafka_behind_proxy() as (broker, proxy):
        env = {"KAFKA_BOOTSTRAP_SERVERS": proxy.address, "SSE_METRICS_TOKEN": OPERATOR_TOKEN}
        server = start_daphne(env, log_name="test-daphne-probes")
        try:
            yield server, broker, proxy
        finally:
            server.stop()


def readyz(server: DaphneServer) -> httpx.Response:
    return httpx.get(f"{server.url}/readyz", timeout=10)


def test_readyz_is_a_503_naming_kafka_while_it_is_unreachable_and_200_again_after(
    behind_a_cuttable_line: tuple[DaphneServer, KafkaCluster, TcpProxy],
) -> None:
    server, _broker, proxy = behind_a_cuttable_line
    wait_until(lambda: readyz(server).status_code == 200, timeout=20)
    proxy.cut()
    wait_until(lambda: readyz(server).status_code == 503, timeout=20)
    refused = readyz(server)
    body = refused.json()
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "5"
    assert body["failed"] == ["kafka"]
    assert body["checks"] == {"postgres": "ok", "redis": "ok", "kafka": "failed", "fetcher": "ok"}
    # an anonymous caller learns which check failed, never the error (it names the broker's host and port)
    assert proxy.address not in refused.text
    assert str(proxy.port) not in refused.text
    operator = httpx.get(f"{server.url}/readyz", headers={"authorization": f"Bearer {OPERATOR_TOKEN}"}, timeout=10)
    assert operator.status_code == 503
    assert operator.json()["detail"].startswith("kafka: ")
    assert operator.json()["checks"]["kafka"] not in ("ok", "failed")
    assert "not ready: kafka: " in server.log_path.read_text()  # the error is in the log
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200  # alive, only not ready
    proxy.restore()
    wait_until(lambda: readyz(server).status_code == 200, timeout=30)


class CountingProxy(TcpProxy):
    """A `TcpProxy` that counts the connections it accepted."""

    accepted = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await super()._accept(reader, writer)


@pytest.fixture
def redis_counted() -> Iterator[tuple[DaphneServer, CountingProxy]]:
    """A server whose every Redis connection goes through a `CountingProxy`."""
    redis_url = urlsplit(settings.REDIS_URL)
    proxy = CountingProxy(int(redis_url.port or 6379))
    proxied = urlunsplit(redis_url._replace(netloc=f"127.0.0.1:{proxy.port}"))
    try:
        server = start_daphne({"REDIS_URL": proxied}, log_name="test-daphne-readyz-flood")
        try:
            yield server, proxy
        finally:
            server.stop()
    finally:
        proxy.close()


def test_a_flood_of_readyz_shares_one_check(redis_counted: tuple[DaphneServer, CountingProxy]) -> None:
    server, proxy = redis_counted
    assert httpx.get(f"{server.url}/readyz", timeout=10).status_code == 200  # the process's own connections open

    async def flood(requests: int) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=requests)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
            return await asyncio.gather(*(client.get("/readyz") for _ in range(requests)))

    before = proxy.accepted
    answers = asyncio.run(flood(40))
    assert [answer.status_code for answer in answers] == [200] * 40
    # each check opens one Redis connection; 40 callers arriving together share one (a loaded machine that
    # spreads them over more than a second may need one or two more), where each used to open its own
    assert proxy.accepted - before < 10, f"{proxy.accepted - before} Redis connections for 40 /readyz"


def test_a_dead_fetcher_thread_makes_the_process_not_ready(loop_thread: LoopThread) -> None:
    runtime = Runtime()
    assert loop_thread.run(checks(runtime))["fetcher"] == "ok"
    hub = loop_thread.run(_hub(runtime))
    try:
        hub.fetcher.stop()  # as if it had died
        found = loop_thread.run(checks(runtime))
        assert found["fetcher"].startswith("the fetcher thread has stopped")
        assert found["kafka"] == found["postgres"] == "ok"
        health = loop_thread.run(_health(runtime))  # on the loop, as the endpoint asks it
        assert health["status"] == "fetcher stopped"  # /-/health no longer says "ok"
    finally:
        loop_thread.run(hub.stop())


async def _hub(runtime: Runtime) -> Hub:
    return runtime.hub()


async def _health(runtime: Runtime) -> dict[str, Any]:
    return runtime.health()
