"""`Openings` (streams/edge/openings.py): streams opening together go through a bounded number at a time, in the
order they came, so the first clients of a reconnect storm are served first; a place is given back once, by the
stream's settling, its end or the hold time, and a client gone while it waited takes no place. Last, in the real
endpoint: a stream waits for a place and takes it from one that settled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from bindings.services import do_put_route
from streams.edge.openings import UNLIMITED, Openings, Place
from tests.conftest import unique
from tests.support.fuzz import Endpoint, endpoint

__all__ = ["endpoint"]  # the fixture, imported for pytest


async def take(openings: Openings, name: str, order: list[str]) -> Place:
    place = await openings.enter()
    order.append(name)
    return place


@pytest.mark.asyncio
async def test_streams_beyond_the_bound_wait_and_go_through_in_the_order_they_came() -> None:
    openings = Openings(at_once=2, hold_s=60)
    order: list[str] = []
    tasks = [asyncio.create_task(take(openings, name, order)) for name in "abcde"]
    await asyncio.sleep(0.01)
    assert order == ["a", "b"]
    assert openings.waited == 3
    places = {name: tasks["abcde".index(name)].result() for name in order}
    places["b"].leave()
    places["b"].leave()  # given back once, however often it is left
    await asyncio.sleep(0.01)
    assert order == ["a", "b", "c"]
    places["a"].leave()
    await asyncio.sleep(0.01)
    assert order == ["a", "b", "c", "d"]
    for task in tasks:
        if task.done():
            task.result().leave()
    await asyncio.sleep(0.01)
    assert order == list("abcde")
    tasks[-1].result().leave()
    assert openings.busy == 0
    assert not openings.queue


@pytest.mark.asyncio
async def test_a_place_not_given_back_is_passed_on_after_the_hold_time() -> None:
    openings = Openings(at_once=1, hold_s=0.05)
    first = await openings.enter()
    started = asyncio.get_running_loop().time()
    second = await asyncio.wait_for(openings.enter(), 1)
    assert asyncio.get_running_loop().time() - started >= 0.04
    first.leave()  # too late: it gave its place away already, and gives nothing more
    assert openings.busy == 1
    second.leave()
    assert openings.busy == 0


@pytest.mark.asyncio
async def test_a_client_gone_while_it_waited_takes_no_place() -> None:
    openings = Openings(at_once=1, hold_s=60)
    first = await openings.enter()
    order: list[str] = []
    gone = asyncio.create_task(take(openings, "gone", order))
    after = asyncio.create_task(take(openings, "after", order))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.sleep(0.01)
    first.leave()
    await asyncio.sleep(0.01)
    assert order == ["after"]
    after.result().leave()
    assert openings.busy == 0


@pytest.mark.asyncio
async def test_a_client_gone_just_as_it_was_given_a_place_passes_it_on() -> None:
    openings = Openings(at_once=1, hold_s=60)
    first = await openings.enter()
    order: list[str] = []
    gone = asyncio.create_task(take(openings, "gone", order))
    after = asyncio.create_task(take(openings, "after", order))
    await asyncio.sleep(0.01)
    first.leave()  # hands the place to `gone`, whose task has not run since
    gone.cancel()
    await asyncio.sleep(0.01)
    assert gone.cancelled()
    assert order == ["after"]
    after.result().leave()
    assert openings.busy == 0


@pytest.mark.asyncio
async def test_without_a_bound_nobody_waits() -> None:
    openings = Openings(at_once=0)
    places = [await openings.enter() for _ in range(1000)]
    assert all(place is UNLIMITED for place in places)
    UNLIMITED.leave()
    assert openings.busy == 0
    assert openings.waited == 0


@pytest.mark.django_db(transaction=True)
def test_a_stream_gives_its_place_back_once_settled_while_it_stays_open(
    endpoint: Endpoint, new_topic: Callable[..., str]
) -> None:
    topic, path = new_topic(), "/" + unique("openings")
    do_put_route(name=path[1:], path=path, topic=topic)
    endpoint.runtime.openings = openings = Openings(at_once=1, hold_s=60)

    async def scenario() -> tuple[int, int]:
        leave = asyncio.Event()
        opened = asyncio.Event()
        requested = False

        async def receive() -> dict[str, object]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.body":
                opened.set()

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
            "client": ("127.0.0.2", 50000), "server": ("127.0.0.1", 8000),
        }  # fmt: skip
        staying = asyncio.create_task(endpoint.app(scope, receive, send))
        await asyncio.wait_for(opened.wait(), 10)
        second = await endpoint._call("GET", path.encode(), b"", [], b"", client="127.0.0.3")  # a place was free
        still_open = endpoint.runtime.stats.open_streams
        leave.set()
        await asyncio.wait_for(staying, 10)
        return second.status, still_open

    status, still_open = endpoint.loop_thread.run(scenario(), timeout=30)
    assert status == 200
    assert still_open == 1  # the first stream was open all along: it had left its place once caught up
    assert openings.busy == 0


@pytest.mark.django_db(transaction=True)
def test_a_stream_waits_for_a_place_and_takes_it_from_one_that_settled(
    endpoint: Endpoint, new_topic: Callable[..., str]
) -> None:
    topic, path = new_topic(), "/" + unique("openings")
    do_put_route(name=path[1:], path=path, topic=topic)
    endpoint.runtime.openings = openings = Openings(at_once=1, hold_s=60)

    async def both() -> list[int]:
        responses = await asyncio.gather(
            endpoint._call("GET", path.encode(), b"", [], b"", client="127.0.0.2"),
            endpoint._call("GET", path.encode(), b"", [], b"", client="127.0.0.3"),
        )
        return [response.status for response in responses]

    assert endpoint.loop_thread.run(both(), timeout=30) == [200, 200]
    assert openings.waited == 1  # the second came while the first opened
    assert openings.busy == 0
