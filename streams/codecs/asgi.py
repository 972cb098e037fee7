"""ASGI types and request helpers shared by the stream endpoint and the guards."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """A request header by its lower-case name; the last one wins, as in Zilla."""
    found = None
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            found = bytes(value)
    return found
