"""`/metrics`: Prometheus figures that match what clients received, merged across platform/web.py's workers, kept
across a worker's death, and closed to scrapers without the token when one is set."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from bindings.services import do_put_route
from streams.edge.metrics import Metrics
from streams.kafka.client import Record
from tests.conftest import unique, wait_until
from tests.support.servers import HOST, healthy, start_daphne, workers_of
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(url: str, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels."""
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_what_clients_received_across_workers_and_a_worker_death(
    web: tuple[subprocess.Popen[bytes], int],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    supervisor, port = web
    url = f"http://{HOST}:{port}"
    topic = new_topic(partitions=1)
    route = unique("metrics")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    received = 0
    streams = [EventStream(f"{url}/{route}") for _ in range(4)]
    try:
        for stream in streams:
            assert stream.next_block().retry is not None  # open and registered
        wait_until(lambda: value(scrape(url), "sse_streams_open", route=route) == 4, timeout=10)
        for n in range(5):
            produce(topic, f"m{n}".encode())
        for stream in streams:
            received += len(stream.events(5))
    finally:
        for stream in streams:
            stream.close()
    assert received == 20

    def settled() -> bool:
        samples = scrape(url)
        return (
            value(samples, "sse_events_delivered_total", route=route) == received
            and value(samples, "sse_streams_open", route=route) == 0
        )

    wait_until(settled, timeout=10)
    samples = scrape(url)
    assert value(samples, "sse_streams_opened_total", route=route, start="fresh") == 4
    assert value(samples, "sse_streams_closed_total", route=route, reason="client_gone") == 4
    assert value(samples, "sse_delivery_latency_seconds_count", route=route) == received
    assert value(samples, "sse_delivery_latency_seconds_bucket", route=route, le="+Inf") == received
    # Each event as written: an id line of a few bytes and `data:mN`.
    assert received * len(b"data:m0\n\n") < value(samples, "sse_delivered_bytes_total", route=route) < received * 64
    assert value(samples, "sse_kafka_fetch_lag_records", topic=topic, partition="0") == 0
    assert value(samples, "sse_cache_bytes") > 0

    assert httpx.get(f"{url}/{unique('nothing')}", timeout=10).status_code == 404
    wait_until(lambda: value(scrape(url), "sse_refusals_total", route="", status="404", reason="no_route") == 1)

    # A worker dies: its replacement starts from nothing, its counters stay in the sums.
    victim = min(workers_of(supervisor.pid))
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: victim not in workers_of(supervisor.pid) and len(workers_of(supervisor.pid)) == 2, timeout=30)
    wait_until(lambda: healthy(port), timeout=30)
    samples = scrape(url)
    assert value(samples, "sse_events_delivered_total", route=route) == received
    assert value(samples, "sse_streams_open", route=route) == 0


def test_with_a_token_set_metrics_are_for_its_bearer_only() -> None:
    server = start_daphne({"SSE_METRICS_TOKEN": "scrape-secret"}, log_name="test-daphne-metrics")
    try:
        refused = httpx.get(f"{server.url}/metrics", timeout=10)
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["www-authenticate"] == 'Bearer realm="metrics"'
        wrong = httpx.get(f"{server.url}/metrics", headers={"authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        assert ("sse_slow_clients_closed_total", ()) in scrape(server.url, authorization="Bearer scrape-secret")
    finally:
        server.stop()


def test_a_fan_out_write_counts_every_client_in_events_bytes_and_latency_buckets() -> None:
    route = unique("unit")
    metrics = Metrics()
    now_ms = int(time.time() * 1000)

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"route": route, **labels}) or 0.0

    batch = [
        (Record(partition=0, offset=0, key=None, value=b"a", headers=(), timestamp_ms=now_ms - 3), 10),
        (Record(partition=0, offset=1, key=None, value=b"b", headers=(), timestamp_ms=now_ms - 200), 20),
    ]
    metrics.delivered(route, "topic", batch, clients=3, live=True)  # one write shared by three clients
    metrics.delivered(route, "topic", [], clients=5, live=True)  # nothing written: nothing counted
    assert sample("sse_events_delivered_total") == 0, "handed over only by sync()"
    metrics.sync()
    assert sample("sse_events_delivered_total") == 6
    assert sample("sse_delivered_bytes_total") == 90
    assert sample("sse_delivery_latency_seconds_count") == 6
    assert sample("sse_delivery_latency_seconds_bucket", le="0.001") == 0
    assert sample("sse_delivery_latency_seconds_bucket", le="0.1") == 3  # the 3 ms event, to each client
    assert sample("sse_delivery_latency_seconds_bucket", le="0.25") == 6
    assert 0.6 <= sample("sse_delivery_latency_seconds_sum") <= 0.7  # 3 x (0.003 + 0.2) s, and a little
    metrics.sync()
    assert sample("sse_events_delivered_total") == 6, "a sync hands each tally over once"


def test_catch_up_writes_count_apart_from_the_live_latency() -> None:
    """A catching-up stream's events are events and bytes like any, but their age goes to its own histogram
    (`sse_catchup_age_seconds`, whose buckets reach a week), never to the live latency."""
    route = unique("unit")
    metrics = Metrics()
    now_ms = int(time.time() * 1000)

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"route": route, **labels}) or 0.0

    def record(offset: int, age_ms: int) -> Record:
        return Record(partition=0, offset=offset, key=None, value=b"v", headers=(), timestamp_ms=now_ms - age_ms)

    metrics.delivered(route, "topic", [(record(0, 2), 10)], clients=2, live=True)
    # A replay: a record from two hours ago and one from 30 s ago, shared by four resuming clients.
    metrics.delivered(route, "topic", [(record(1, 7_200_000), 10), (record(2, 30_000), 10)], clients=4, live=False)
    metrics.sync()
    assert sample("sse_events_delivered_total") == 2 + 8
    assert sample("sse_delivered_bytes_total") == 20 + 80
    assert sample("sse_delivery_latency_seconds_count") == 2  # the live write only
    assert sample("sse_delivery_latency_seconds_bucket", le="0.1") == 2
    assert sample("sse_delivery_latency_seconds_sum") < 0.1
    assert sample("sse_catchup_age_seconds_count") == 8
    assert sample("sse_catchup_age_seconds_bucket", le="10.0") == 0
    assert sample("sse_catchup_age_seconds_bucket", le="60.0") == 4  # the 30 s old one, to each client
    assert sample("sse_catchup_age_seconds_bucket", le="3600.0") == 4
    assert sample("sse_catchup_age_seconds_bucket", le="21600.0") == 8  # and the two hours old one
    assert 4 * (7200 + 30) <= sample("sse_catchup_age_seconds_sum") <= 4 * (7200 + 30) + 1
