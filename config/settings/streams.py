"""Data-plane settings: how SSE streams behave."""

from __future__ import annotations

from config.env import envint, envlist

# Sent as the first line of every stream; browsers wait this long before reconnecting.
SSE_RETRY_MS = envint("SSE_RETRY_MS", default=2_000, minimum=0)
# A `:` comment after this many idle seconds keeps proxies from closing the stream (0 = off).
SSE_KEEPALIVE_S = envint("SSE_KEEPALIVE_S", default=15, minimum=0)
# Paths under these prefixes belong to Django (admin, API, static files, the demo page), never to a route.
SSE_RESERVED_PREFIXES = tuple(envlist("SSE_RESERVED_PREFIXES", ["/admin/", "/api/", "/static/", "/-/"]))
