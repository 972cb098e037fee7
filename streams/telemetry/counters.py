"""Counters of a web process's streams, read by the health endpoint and tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StreamStats:
    open_streams: int = 0
    malformed_ids: int = 0
    closed_slow: int = 0
