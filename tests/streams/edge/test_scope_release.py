"""An open stream lets go of its request's ASGI scope (its dicts, addresses and path, about 1 KB a stream:
docs/benchmarks.md, "Memory per idle stream"): nothing of the endpoint holds it once the stream serves, and the
access log still names the stream's client when it ends."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest

from bindings.services import do_put_route
from tests.conftest import unique
from tests.support.fuzz import Endpoint, endpoint, request_then_leave

__all__ = ["endpoint"]  # the fixture, imported for pytest


class Scope(dict[str, Any]):
    """A scope that can be referred to weakly, as a plain dict cannot."""


@pytest.mark.django_db(transaction=True)
def test_an_open_stream_holds_no_reference_to_its_scope(
    endpoint: Endpoint, new_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    topic, path = new_topic(), "/" + unique("scope")
    do_put_route(name=path[1:], path=path, topic=topic)
    runtime = endpoint.runtime

    async def scenario() -> tuple[bool, int]:
        leave, opened = asyncio.Event(), asyncio.Event()

        receive = request_then_leave(leave)

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                opened.set()

        scope = Scope(
            type="http", asgi={"version": "3.0"}, http_version="1.1", method="GET", scheme="http", path=path,
            raw_path=path.encode(), query_string=b"", root_path="", headers=[(b"user-agent", b"probe")],
            client=("127.0.0.9", 50000), server=("127.0.0.1", 8000),
        )  # fmt: skip
        held = weakref.ref(scope)
        staying = asyncio.create_task(endpoint.app(scope, receive, send))
        del scope
        await asyncio.wait_for(opened.wait(), 10)
        for _ in range(50):  # until its pump first rests: the stream is open and idle
            await asyncio.sleep(0.01)
            if not runtime.opening:
                break
        released = held() is None  # by reference counting: no collection ran for it
        streams = runtime.stats.open_streams
        leave.set()
        await asyncio.wait_for(staying, 10)
        return released, streams

    with caplog.at_level(logging.INFO, logger="access"):
        released, streams = endpoint.loop_thread.run(scenario(), timeout=30)
    assert streams == 1  # it was open when its scope was looked for
    assert released
    ends = [record for record in caplog.records if getattr(record, "path", None) == path]
    fields = [(vars(record)["method"], vars(record)["client"], vars(record)["status"]) for record in ends]
    assert fields == [("GET", "127.0.0.9", 200)]
