"""/healthz and /readyz: liveness, and readiness that names what failed, against the real services and a broker
whose line the test cuts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

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


@pytest.fixture
def behind_a_cuttable_line() -> Iterator[tuple[DaphneServer, KafkaCluster, TcpProxy]]:
    with kafka_behind_proxy() as (broker, proxy):
        server = start_daphne({"KAFKA_BOOTSTRAP_SERVERS": proxy.address}, log_name="test-daphne-probes")
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
    assert body["checks"]["postgres"] == body["checks"]["redis"] == "ok"
    assert body["detail"].startswith("kafka: ")
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200  # alive, only not ready
    proxy.restore()
    wait_until(lambda: readyz(server).status_code == 200, timeout=30)


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
