"""Data-plane settings: how SSE streams behave."""

from __future__ import annotations

from config.env import envint, envlist

# The retry line and keep-alive interval are per SSE endpoint (bindings.Endpoint), not settings.
# Paths under these prefixes belong to Django (admin, API, static files, the demo page), never to a route.
SSE_RESERVED_PREFIXES = tuple(envlist("SSE_RESERVED_PREFIXES", ["/admin/", "/api/", "/static/", "/-/"]))

# The per-process cache of recent records, shared by every stream of the process.
SSE_CACHE_MAX_BYTES = envint("SSE_CACHE_MAX_BYTES", default=256 * 1024 * 1024, minimum=1024 * 1024)
# Topics fetched from their earliest offset as soon as a web process starts, and never dropped.
SSE_BOOTSTRAP_TOPICS = tuple(envlist("SSE_BOOTSTRAP_TOPICS", []))
# A topic no stream has read for this long is dropped from the cache.
SSE_TOPIC_IDLE_S = envint("SSE_TOPIC_IDLE_S", default=60, minimum=1)
# On a busy topic, fan out at most once per this many ms, so each write carries more events (0 = off);
# the first batch after a quiet spell goes out at once. Measured: 20 ms halves p99 at 1000 clients x 100 msg/s.
SSE_COALESCE_MS = envint("SSE_COALESCE_MS", default=20, minimum=0, maximum=1000)
# A client whose connection is full and who is this far behind is closed; it resumes with Last-Event-ID.
SSE_MAX_PENDING_BYTES = envint("SSE_MAX_PENDING_BYTES", default=1024 * 1024, minimum=64 * 1024)
# ...once its connection has been full, draining nothing, for this long (a replay fills it for a moment).
SSE_STALL_GRACE_MS = envint("SSE_STALL_GRACE_MS", default=2000, minimum=0)
# A stream whose read position has not moved for this long while its client reads and its partitions grew is
# logged and counted as stalled (`/-/health`): the symptom of a defect, made visible instead of silent.
SSE_STALL_NOTICE_S = envint("SSE_STALL_NOTICE_S", default=30, minimum=1)
