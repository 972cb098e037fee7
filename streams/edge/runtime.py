"""Everything one web process holds for its streams, in one object handed to the endpoint.

- `routes`: the route table, rebuilt on announced changes (streams/routes/table.py);
- `open_streams`: the open streams by route, closed when their route changes;
- `renewals`: the guarded streams, renewed by challenge responses from any process (streams/access/renewal.py);
- `revocations`: the revoked identities and tokens, refused and their streams ended (streams/access/revocations.py);
- `stats`: the counters the health endpoint reports;
- `delivery_log`: what the streams delivered and refused, on a Kafka topic for the analytics
  (streams/telemetry/delivery_log.py);
- `metrics`: the same, and the process's gauges, for Prometheus (streams/edge/metrics.py);
- `memory`: gives memory back to the OS while no stream is open (streams/edge/memory.py);
- `hub()`: the hub of the running event loop: fetcher, cache and fan-out (streams/hub/hub.py), started on first use.

A server process has one, `runtime`; tests may make their own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from streams.access.renewal import Renewals
from streams.access.revocations import Revocations
from streams.edge.limits import RateLimit, StreamLimits
from streams.edge.memory import Reclaimer
from streams.edge.metrics import (
    FILTER_FAILURES,
    LOG_DROPPED,
    REFUSALS,
    RENEWALS,
    ROUTE_RELOADS,
    SLOW_CLOSED,
    STREAMS_CLOSED,
    STREAMS_OPEN,
    STREAMS_OPENED,
    Metrics,
)
from streams.hub.hub import Hub, current_hub, get_hub
from streams.kafka.client import ReaderStats
from streams.kafka.decoding import Models
from streams.routes.expressions import ExpressionStats
from streams.routes.table import OpenStreams, RouteTable
from streams.server import collector
from streams.server.bodies import HeldBodies
from streams.server.reaping import ServerConnections
from streams.telemetry.counters import StreamStats
from streams.telemetry.delivery_log import DeliveryLog, DeliverySinks
from streams.telemetry.delivery_schema import End, Start
from streams.telemetry.log_writer import LogTopic

# Streams opening at once past which the live fan-out yields more of the loop (streams/hub/hub.py, FanOut).
STORM_OPENING = 100

# What a process's hub counts, all zero before its first stream starts the hub.
IDLE_COUNTERS = (
    "kafka_consumers", "fetch_streams", "subscriptions", "stalled_streams", "stalls_noticed", "fetcher_restarts",
    "topics_deleted",
)  # fmt: skip


def delivery_log_from_settings() -> DeliveryLog:
    salt = settings.DELIVERY_LOG_SALT or hashlib.sha256(f"delivery-log:{settings.SECRET_KEY}".encode()).hexdigest()
    topic = LogTopic(
        settings.KAFKA,
        settings.DELIVERY_LOG_TOPIC,
        partitions=settings.DELIVERY_LOG_PARTITIONS,
        retention_ms=settings.DELIVERY_LOG_RETENTION_H * 3600 * 1000,
    )
    return DeliveryLog(
        topic if settings.DELIVERY_LOG_ENABLED else None,
        salt=salt.encode(),
        flush_s=settings.DELIVERY_LOG_FLUSH_S,
        report_s=settings.DELIVERY_LOG_REPORT_S,
        max_rows=settings.DELIVERY_LOG_MAX_ROWS,
    )


@dataclass
class Runtime:
    open_streams: OpenStreams = field(default_factory=OpenStreams)
    renewals: Renewals = field(default_factory=Renewals)
    stats: StreamStats = field(default_factory=StreamStats)
    delivery_log: DeliveryLog = field(default_factory=delivery_log_from_settings)
    metrics: Metrics = field(default_factory=Metrics)
    limits: StreamLimits = field(default_factory=StreamLimits)
    challenges: RateLimit = field(default_factory=lambda: RateLimit("SSE_MAX_CHALLENGE_RESPONSES_PER_MIN"))
    routes: RouteTable = field(init=False)
    revocations: Revocations = field(init=False)
    deliveries: DeliverySinks = field(init=False)  # what the pumps tell of each write: log and metrics
    memory: Reclaimer = field(init=False)
    opening: int = 0  # streams between their request and their pump's first rest (caught up, or waiting)

    def __post_init__(self) -> None:
        self.routes = RouteTable(self.open_streams)
        self.routes.on_models = self._models_changed
        self.revocations = Revocations(self.renewals)
        self.renewals.is_revoked = self.revocations.covers
        self.deliveries = DeliverySinks(self.delivery_log, self.metrics)
        self.memory = Reclaimer(lambda: self.stats.open_streams == 0, settings.SSE_MEMORY_TRIM_S)
        metrics = self.metrics
        metrics.hub = current_hub
        metrics.count(RENEWALS, lambda: self.renewals.renewed)
        metrics.count(ROUTE_RELOADS, lambda: self.routes.reloads)
        metrics.count(LOG_DROPPED, lambda: self.delivery_log.stats()["delivery_log_dropped"])
        metrics.count(SLOW_CLOSED, lambda: self.stats.closed_slow)
        metrics.count(FILTER_FAILURES, lambda: ExpressionStats.failures)

    # --- what happens to streams, told to the delivery log and the metrics ------------------------------

    def refused(self, route: str, status: int, reason: str) -> None:
        self.delivery_log.refused(route, status, reason)
        REFUSALS.labels(route, str(status), reason).inc()

    def opened(self, route: str, start: Start) -> None:
        self.stats.open_streams += 1
        STREAMS_OPEN.labels(route).inc()
        STREAMS_OPENED.labels(route, start.value).inc()

    def closed(self, route: str, end: End) -> None:
        self.stats.open_streams -= 1
        STREAMS_OPEN.labels(route).dec()
        STREAMS_CLOSED.labels(route, end.value).inc()

    def hub(self) -> Hub:
        hub = get_hub()
        hub.decode_with(self.routes.models)  # a hub started after the route table was read
        hub.fan_out.opens_waiting = self.storming  # its fan-out yields more while many streams are opening
        return hub

    def storming(self) -> bool:
        """Whether many streams are opening now (a reconnect storm)."""
        return self.opening > STORM_OPENING

    def _models_changed(self, models: Models) -> None:
        """The route table read other catalogs or topic models: the running hub decodes with them from now on."""
        hub = current_hub()
        if hub is not None:
            hub.decode_with(models)

    def health(self) -> dict[str, Any]:
        """What `/-/health` reports: this process's streams, its Kafka side and its control-plane traffic."""
        hub = current_hub()
        counts = hub.stats() if hub else dict.fromkeys(IDLE_COUNTERS, 0)
        counts["kafka_consumers"] += ReaderStats.historical_readers
        fetching = hub is None or hub.fetcher.consumers.alive
        return {
            "status": "ok" if fetching else "fetcher stopped",
            "streams": self.stats.open_streams,
            "malformed_ids": self.stats.malformed_ids,
            "closed_slow": self.stats.closed_slow,
            "server_connections": ServerConnections.count(),  # streams/server/reaping.py
            "request_body_bytes_held": HeldBodies.held,  # within HTTP_BODIES_MAX_BYTES (streams/server/bodies.py)
            "historical_readers": ReaderStats.historical_readers,
            "route_reloads": self.routes.reloads,
            "closed_on_change": self.open_streams.closed,
            "renewed_by_challenge": self.renewals.renewed,
            "closed_on_revocation": self.revocations.closed,
            **counts,
            **self.delivery_log.stats(),
            # Frozen after each full pass; counted at start and at each review (streams/server/collector.py).
            "gc_frozen_objects": collector.frozen_objects(),
            "memory_reclaims": self.memory.runs,
        }


runtime = Runtime()
