"""`Runtime.opening` (streams/edge/endpoint.py): a stream counts among those opening from its request until its pump
first rests (caught up, or waiting for records), not for as long as it stays open, nor past a request that ends
first; past `STORM_OPENING` of them the live fan-out yields more of the loop (streams/hub/hub.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest

from bindings.services import do_put_route
from streams.edge.runtime import STORM_OPENING
from tests.conftest import unique
from tests.support.fuzz import Endpoint, endpoint, request_then_leave

__all__ = ["endpoint"]  # the fixture, imported for pytest


@pytest.mark.django_db(transaction=True)
def test_a_stream_counts_as_opening_until_its_pump_first_rests(
    endpoint: Endpoint, new_topic: Callable[..., str]
) -> None:
    topic, path = new_topic(), "/" + unique("opening")
    do_put_route(name=path[1:], path=path, topic=topic)
    runtime = endpoint.runtime

    async def scenario() -> tuple[int, int, int]:
        leave, opened = asyncio.Event(), asyncio.Event()
        counted: list[int] = []

        receive = request_then_leave(leave)

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                counted.append(runtime.opening)  # its opening chunk, before its pump has run
                opened.set()

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
            "client": ("127.0.0.2", 50000), "server": ("127.0.0.1", 8000),
        }  # fmt: skip
        staying = asyncio.create_task(endpoint.app(scope, receive, send))
        await asyncio.wait_for(opened.wait(), 10)
        while_opening = counted[0]
        for _ in range(50):  # the pump's first turns: nothing to read at the live end, so it rests
            await asyncio.sleep(0.01)
            if not runtime.opening:
                break
        rested, streams = runtime.opening, runtime.stats.open_streams
        leave.set()
        await asyncio.wait_for(staying, 10)
        return while_opening, rested, streams

    while_opening, rested, streams = endpoint.loop_thread.run(scenario(), timeout=30)
    assert while_opening == 1
    assert rested == 0
    assert streams == 1  # open all along
    assert runtime.opening == 0


@pytest.mark.django_db(transaction=True)
def test_a_refused_stream_counts_no_longer(endpoint: Endpoint) -> None:
    response = endpoint.call(b"/" + unique("nowhere").encode())
    assert response.status == 404
    assert endpoint.runtime.opening == 0


def test_a_storm_is_more_than_a_hundred_opening() -> None:
    from streams.edge.runtime import Runtime  # noqa: PLC0415  (settings read at construction)

    runtime = Runtime.__new__(Runtime)  # just the counter: no delivery log, metrics or route table
    runtime.opening = STORM_OPENING
    assert not runtime.storming()
    runtime.opening += 1
    assert runtime.storming()
