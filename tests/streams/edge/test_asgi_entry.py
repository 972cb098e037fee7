"""The ASGI application daphne serves (config/asgi.py) is the stream endpoint itself, with no router in front
(one coroutine less held by every open stream); what is not HTTP is still refused, as channels' router refused it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.edge.endpoint import StreamEndpoint


def test_the_application_is_the_endpoint_and_refuses_what_is_not_http() -> None:
    from config.asgi import application  # noqa: PLC0415  (builds Django's ASGI handler)

    assert isinstance(application, StreamEndpoint)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        raise AssertionError(f"nothing is sent to a websocket: {message}")

    with pytest.raises(ValueError, match="websocket"):
        asyncio.run(application({"type": "websocket", "path": "/items", "headers": []}, receive, send))
