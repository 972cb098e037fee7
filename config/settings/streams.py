"""Data-plane settings: how SSE streams behave."""

from __future__ import annotations

from pathlib import Path

from config.env import BASE_DIR, envbool, envint, envlist, envstr

# The retry line and keep-alive interval are per SSE endpoint (bindings.Endpoint), not settings.
# Paths under these prefixes belong to Django (admin, API, static files, the demo page), never to a route.
SSE_RESERVED_PREFIXES = tuple(envlist("SSE_RESERVED_PREFIXES", ["/admin/", "/analytics/", "/api/", "/static/", "/-/"]))

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

# A guard's JWKS URL (streams/jwks.py): https only unless this is set (the tests serve keys over local http);
# the whole fetch (connect, TLS, headers, body) must end within the timeout, and a larger document is refused.
# Until the keys can be read, the guard's routes answer 503.
SSE_JWKS_ALLOW_HTTP = envbool("SSE_JWKS_ALLOW_HTTP", False)
SSE_JWKS_TIMEOUT_S = envint("SSE_JWKS_TIMEOUT_S", default=5, minimum=1, maximum=60)
SSE_JWKS_MAX_BYTES = envint("SSE_JWKS_MAX_BYTES", default=256 * 1024, minimum=1024)

# The delivery log (docs/delivery-log.md): what each process delivered and refused, as Parquet files the
# analytics rollup reads. With several nodes, point it at storage every node and the Spark workers share.
DELIVERY_LOG_ENABLED = envbool("DELIVERY_LOG_ENABLED", True)
DELIVERY_LOG_DIR = Path(envstr("DELIVERY_LOG_DIR", str(BASE_DIR / "var" / "delivery-log")))
# Rows are written this often (and at exit): a process that dies loses at most this much of the log.
DELIVERY_LOG_FLUSH_S = envint("DELIVERY_LOG_FLUSH_S", default=5, minimum=1, maximum=300)
# Rows waiting to be written, at most; past it rows are dropped and counted, streams never wait.
DELIVERY_LOG_MAX_ROWS = envint("DELIVERY_LOG_MAX_ROWS", default=100_000, minimum=1000)
# The key of the hashes that stand for identities and client addresses (default: derived from SECRET_KEY).
DELIVERY_LOG_SALT = envstr("DELIVERY_LOG_SALT", default="")
