"""Data-plane settings: how SSE streams behave."""

from __future__ import annotations

from config.env import envbool, envint, envlist, envstr

# The retry line and keep-alive interval are per SSE endpoint (bindings.Endpoint), not settings.
# Paths under these prefixes belong to Django (admin, API, static files, the demo page), never to a route.
SSE_RESERVED_PREFIXES = tuple(envlist("SSE_RESERVED_PREFIXES", ["/admin/", "/analytics/", "/api/", "/static/", "/-/"]))
# What the edge in front of the workers enforces (platform/edge/haproxy.cfg, which platform/web.py hands these):
# a request's headers must be complete this long after its connection opened (the TLS handshake included) or its
# previous response ended, and a kept-alive connection must bring its next request within the idle bound, or it is
# closed. Bytes trickling in do not extend either; a stream in flight is never "idle".
HTTP_HEADER_TIMEOUT_S = envint("HTTP_HEADER_TIMEOUT_S", default=15, minimum=1, maximum=3600)
HTTP_IDLE_TIMEOUT_S = envint("HTTP_IDLE_TIMEOUT_S", default=60, minimum=1, maximum=3600)
# A request's body must be complete this long after its headers, or the request is refused (408) and what arrived
# of it dropped (the edge for what its buffer holds, the workers for the rest: streams/server/bodies.py); trickled
# bytes do not extend it.
HTTP_BODY_TIMEOUT_S = envint("HTTP_BODY_TIMEOUT_S", default=30, minimum=1, maximum=3600)
# The largest request body the API and the admin read (an API request past it is a 413 problem); the edge refuses a
# larger declared length, the workers a larger body as it arrives.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("API_MAX_BODY_BYTES", default=2_621_440, minimum=1024)
# Request body bytes one web process holds at once, all requests together, from their arrival (a declared
# Content-Length counts whole at once) until the response ends; past it a new body is refused with a 503
# (streams/server/bodies.py). At least one body of the largest size must fit.
HTTP_BODIES_MAX_BYTES = envint("HTTP_BODIES_MAX_BYTES", default=64 * 1024 * 1024, minimum=DATA_UPLOAD_MAX_MEMORY_SIZE)

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
# Any client whose connection is full must, within this many seconds, take everything that was pending for it when
# it filled; one that does not is closed however little it drains (it resumes with Last-Event-ID), so a reader
# that takes a trickle, or nothing at all, holds no stream, no reader of history and no memory for long. An HTTP/2
# response that has ended while its body still waits for the client's window is reset after as long.
SSE_CATCH_UP_S = envint("SSE_CATCH_UP_S", default=30, minimum=1, maximum=3600)
# A stream whose read position has not moved for this long while its client reads and its partitions grew is
# logged and counted as stalled (`/-/health`): the symptom of a defect, made visible instead of silent.
SSE_STALL_NOTICE_S = envint("SSE_STALL_NOTICE_S", default=30, minimum=1)
# While a process has no stream open, every this many seconds: a full garbage collection, then the C library's free
# memory handed back to the kernel (streams/edge/memory.py); 0 = never.
SSE_MEMORY_TRIM_S = envint("SSE_MEMORY_TRIM_S", default=30, minimum=0)

# A guard's JWKS URL (streams/access/jwks.py): https only unless this is set (the tests serve keys over local http);
# the whole fetch (connect, TLS, headers, body) must end within the timeout, and a larger document is refused.
# Until the keys can be read, the guard's routes answer 503.
SSE_JWKS_ALLOW_HTTP = envbool("SSE_JWKS_ALLOW_HTTP", False)
SSE_JWKS_TIMEOUT_S = envint("SSE_JWKS_TIMEOUT_S", default=5, minimum=1, maximum=60)
SSE_JWKS_MAX_BYTES = envint("SSE_JWKS_MAX_BYTES", default=256 * 1024, minimum=1024)

# Registry catalogs (docs/schemas.md, "What a registry may cost"): each process's client of one registry caches at
# most this many answers and bytes of schema text, makes at most this many requests a second, and gives up on a
# schema the registry keeps refusing (a 403, an answer over 4 MiB, a type not known) after this many seconds, its
# records then skipped as unknown-schema. A .proto from a catalog compiles within this many seconds, protoc writing
# at most this many bytes per file, or is refused (its records skipped as schema-mismatch).
SSE_REGISTRY_CACHE_ENTRIES = envint("SSE_REGISTRY_CACHE_ENTRIES", default=1000, minimum=10)
SSE_REGISTRY_CACHE_BYTES = envint("SSE_REGISTRY_CACHE_BYTES", default=64 * 1024 * 1024, minimum=8 * 1024 * 1024)
SSE_REGISTRY_LOOKUPS_PER_S = envint("SSE_REGISTRY_LOOKUPS_PER_S", default=20, minimum=1, maximum=10_000)
SSE_REGISTRY_GIVE_UP_S = envint("SSE_REGISTRY_GIVE_UP_S", default=60, minimum=1, maximum=86_400)
SSE_PROTOC_TIMEOUT_S = envint("SSE_PROTOC_TIMEOUT_S", default=10, minimum=1, maximum=600)
SSE_PROTOC_MAX_BYTES = envint("SSE_PROTOC_MAX_BYTES", default=16 * 1024 * 1024, minimum=64 * 1024)

# The delivery log (docs/delivery-log.md): what each process delivered and refused, as rows on a Kafka topic that
# the analytics rollup reads. The platform creates the topic (on a web process's first row, and before each
# rollup) with these partitions and this retention: keep it longer than the rollup may be stopped.
DELIVERY_LOG_ENABLED = envbool("DELIVERY_LOG_ENABLED", True)
DELIVERY_LOG_TOPIC = envstr("DELIVERY_LOG_TOPIC", default="sse-delivery-log")
DELIVERY_LOG_PARTITIONS = envint("DELIVERY_LOG_PARTITIONS", default=4, minimum=1, maximum=1000)
DELIVERY_LOG_RETENTION_H = envint("DELIVERY_LOG_RETENTION_H", default=7 * 24, minimum=1)
# Rows are sent this often (and at exit): a process that dies loses at most this much of the log.
DELIVERY_LOG_FLUSH_S = envint("DELIVERY_LOG_FLUSH_S", default=5, minimum=1, maximum=300)
# Each process reports this often that it is alive; two intervals without a report and the rollup stops counting
# its streams as open.
DELIVERY_LOG_REPORT_S = envint("DELIVERY_LOG_REPORT_S", default=15, minimum=1, maximum=300)
# Rows waiting to be sent, at most; past it rows are dropped and counted, streams never wait.
DELIVERY_LOG_MAX_ROWS = envint("DELIVERY_LOG_MAX_ROWS", default=100_000, minimum=1000)
# The key of the hashes that stand for identities and client addresses (default: derived from SECRET_KEY).
DELIVERY_LOG_SALT = envstr("DELIVERY_LOG_SALT", default="")

# `/metrics` (Prometheus, docs/operations.md): open to whoever reaches it, or only to `Authorization: Bearer <this>`.
# `/readyz` shows its checks' errors (hosts, ports) to that bearer only, to nobody while this is unset.
SSE_METRICS_TOKEN = envstr("SSE_METRICS_TOKEN", default="")

# Topics never served, besides Kafka's own (names starting `__`): a name, or a prefix followed by `*`. A route
# naming one is refused on save; a stream whose template renders one is a 404, as an unknown topic is.
# The delivery log's topic is always among them: its rows are the platform's, not a stream's.
SSE_INTERNAL_TOPICS = (*envlist("SSE_INTERNAL_TOPICS", ["_schemas", "_confluent*"]), DELIVERY_LOG_TOPIC)

# Limits (docs/operations.md): each refusal is a 429 or 503 problem with `retry-after: SSE_LIMIT_RETRY_AFTER_S`.
# Streams one web process holds open at once (0: no limit); past it, a 503 sends the client to another process.
SSE_MAX_STREAMS = envint("SSE_MAX_STREAMS", default=20_000, minimum=0)
# Streams one client address / one guard identity may hold open per endpoint in one process (0: no limit); an
# endpoint may set its own. Behind a proxy, run daphne with --proxy-headers and name the proxy in TRUSTED_PROXIES
# (config/settings/base.py) so the address is the client's.
SSE_MAX_STREAMS_PER_CLIENT = envint("SSE_MAX_STREAMS_PER_CLIENT", default=100, minimum=0)
SSE_MAX_STREAMS_PER_IDENTITY = envint("SSE_MAX_STREAMS_PER_IDENTITY", default=0, minimum=0)
# Connections one client address may hold open, both ports together (0: no limit); past it the edge closes a
# connection as soon as it is accepted. HTTP/2 gives each connection up to 100 streams.
SSE_MAX_CONNECTIONS_PER_CLIENT = envint("SSE_MAX_CONNECTIONS_PER_CLIENT", default=100, minimum=0)
# Every per-address limit (the three above and below, and the admin's sign-in lockout) counts an IPv6 client by its
# prefix of this many bits, as one client holds a /64 at least and may use a new address for every connection
# (streams/server/addresses.py). 128: each address on its own.
# Set by platform/web.py for its workers, never by hand: the token its edge puts on every request it hands on, so
# that the workers believe that request's forwarded headers (streams/server/forwarded.py). Empty: no edge.
SSE_EDGE_TOKEN = envstr("SSE_EDGE_TOKEN", "")
SSE_CLIENT_IPV6_PREFIX = envint("SSE_CLIENT_IPV6_PREFIX", default=64, minimum=32, maximum=128)
SSE_LIMIT_RETRY_AFTER_S = envint("SSE_LIMIT_RETRY_AFTER_S", default=5, minimum=1, maximum=3600)
# Challenge responses one identity (or, without a valid token, one address) may send per minute (0: no limit).
SSE_MAX_CHALLENGE_RESPONSES_PER_MIN = envint("SSE_MAX_CHALLENGE_RESPONSES_PER_MIN", default=60, minimum=0)
# A request for a path no route matches reads the route table again (a route may have been added a moment ago);
# such reads happen at most this often per process, requests in between waiting for the next one.
SSE_UNKNOWN_PATH_RELOAD_MS = envint("SSE_UNKNOWN_PATH_RELOAD_MS", default=500, minimum=0, maximum=60_000)
# `?since=` lookups (Kafka's offsets for a time) are kept this long per topic and time, and shared.
SSE_SINCE_CACHE_S = envint("SSE_SINCE_CACHE_S", default=10, minimum=0, maximum=3600)

# Decoding (docs/schemas.md, "What a record may cost"): a key or value of a topic with a model past one of these is
# skipped as `too-large`: its bytes (raw, and as the JSON it decodes to), its items (array items and map entries or
# object members, at any depth) and how deep it nests.
DECODE_MAX_BYTES = envint("DECODE_MAX_BYTES", default=2 * 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024)
DECODE_MAX_ITEMS = envint("DECODE_MAX_ITEMS", default=100_000, minimum=10)
DECODE_MAX_DEPTH = envint("DECODE_MAX_DEPTH", default=100, minimum=2, maximum=1000)
# One record's own decoding work (not a registry's answer or a schema's compile, which have timeouts of their own)
# may take this long before the process decoding it (the decoded topics' fetch process, the historical readers'
# decoder process) is ended and the record skipped as `too-slow`.
DECODE_BUDGET_MS = envint("DECODE_BUDGET_MS", default=1000, minimum=10, maximum=60_000)
# The address space of the historical readers' decoder process: past it an allocation fails (the record is skipped
# as `crashed`) rather than the kernel's OOM killer choosing a process (0: no limit).
DECODE_MEMORY_MB = envint("DECODE_MEMORY_MB", default=1024, minimum=0)
