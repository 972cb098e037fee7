"""Data-plane settings: how SSE streams behave."""

from __future__ import annotations

from config.env import envlist

# The retry line and keep-alive interval are per SSE endpoint (bindings.Endpoint), not settings.
# Paths under these prefixes belong to Django (admin, API, static files, the demo page), never to a route.
SSE_RESERVED_PREFIXES = tuple(envlist("SSE_RESERVED_PREFIXES", ["/admin/", "/api/", "/static/", "/-/"]))
