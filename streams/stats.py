"""Counters of this web process, read by the health endpoint and tests."""

from __future__ import annotations


class StreamStats:
    """Counters of this process (health endpoint, tests)."""

    open_streams = 0
    malformed_ids = 0
    closed_slow = 0
