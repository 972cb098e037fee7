"""A small blocking SSE client for tests: reads events from a live server with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx


@dataclass
class Event:
    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)
    retry: int | None = None
    comments: list[str] = field(default_factory=list)
    raw: bytes = b""

    @property
    def text(self) -> str:
        return "\n".join(self.data)

    @property
    def is_event(self) -> bool:
        return bool(self.data) or self.event is not None


def parse_block(block: bytes) -> Event:
    result = Event(raw=block)
    for line in block.decode("utf-8", errors="replace").split("\n"):
        name, _, value = line.partition(":")
        if name == "":
            result.comments.append(value)
        elif name == "id":
            result.id = value
        elif name == "event":
            result.event = value
        elif name == "data":
            result.data.append(value)
        elif name == "retry":
            result.retry = int(value)
    return result


class EventStream:
    """GET `url` and read SSE blocks; raises TimeoutError when nothing arrives before the deadline."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> None:
        self.client = httpx.Client(timeout=httpx.Timeout(timeout))
        try:
            self.response = self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)
        except BaseException:  # refused, timed out, reset: the client's socket is closed here, not by a collection
            self.client.close()
            raise
        self._chunks: Iterator[bytes] = self.response.iter_raw()
        self._buffer = b""
        self.timeout = timeout

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.response.close()
        self.client.close()

    def next_block(self, timeout: float | None = None) -> Event:
        deadline = time.monotonic() + (timeout or self.timeout)
        while b"\n\n" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no complete SSE block before the deadline")
            self._buffer += next(self._chunks)
        block, self._buffer = self._buffer.split(b"\n\n", 1)
        return parse_block(block)

    def next_event(self, timeout: float | None = None) -> Event:
        """The next block that is an event (skips the retry line and keep-alive comments)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            block = self.next_block(max(0.01, deadline - time.monotonic()))
            if block.is_event:
                return block

    def events(self, count: int, timeout: float | None = None) -> list[Event]:
        return [self.next_event(timeout) for _ in range(count)]
