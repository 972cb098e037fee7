"""`race` (streams/edge/race.py) in the test's own task: a pump that is a coroutine of the test's, a `Flow` told of
its client's going as daphne tells it (`client_lost`), and `stop` resolved as `Stream.end` resolves it. The stream
runs in the one task it is given, and every way it ends keeps its reason. Last, a pump that fails in the real
endpoint (tests/support/fuzz.py); the other ends against a live server: test_stream_ends.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from bindings.services import do_put_route
from streams.access.revocations import REVOKED_EVENT
from streams.codecs.asgi import Message
from streams.edge.race import race
from streams.server.daphne import Flow
from streams.stream.pump import Pump as StreamPump
from streams.telemetry.delivery_schema import End
from tests.conftest import unique
from tests.support.fuzz import Endpoint, endpoint

__all__ = ["endpoint"]  # the fixture, imported for pytest

TOPIC = "orders"


class Client:
    """The ASGI side of one stream: what the app sent, and what it receives (nothing until `leave`)."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.messages: asyncio.Queue[Message] = asyncio.Queue()

    async def send(self, message: Message) -> None:
        await asyncio.sleep(0)  # a real send may wait: a cancellation pending for the task would land here
        self.sent.append(message)

    async def receive(self) -> Message:
        return await self.messages.get()

    def leave(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})


class Pump:
    """A pump that waits for records that never come (or returns, or raises, when told), noting the tasks that
    exist while it runs."""

    def __init__(self, *, then: Callable[[], None] | None = None) -> None:
        self.started = asyncio.Event()
        self.tasks_while_running: set[asyncio.Task[Any]] = set()
        self.then = then
        self.cancelled = False

    async def run(self) -> None:
        self.tasks_while_running = asyncio.all_tasks()
        self.started.set()
        if self.then is not None:
            self.then()
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def racing(pump: Pump, stop: asyncio.Future[End], client: Client, flow: Flow | None) -> End:
    return await race(pump.run(), stop, flow=flow, receive=client.receive, send=client.send, topic=TOPIC)


def new_flow() -> Flow:
    return Flow(request=None)


@pytest.mark.asyncio
async def test_a_stream_runs_in_the_task_it_is_given_and_ends_when_its_client_goes() -> None:
    pump, client, flow = Pump(), Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    before = asyncio.all_tasks()
    stream = asyncio.create_task(racing(pump, stop, client, flow))
    await pump.started.wait()
    assert pump.tasks_while_running == before | {stream}  # the stream's own task, and nothing more
    flow.client_lost()
    assert await stream is End.CLIENT_GONE
    assert pump.cancelled
    assert client.sent == []  # a client that left is sent nothing
    assert flow.on_lost is None  # nothing of the stream is left on its connection
    assert stop.cancelled()  # a later `Stream.end` does nothing
    assert stream.cancelling() == 0


@pytest.mark.asyncio
async def test_a_client_gone_before_the_stream_started_ends_it_at_once() -> None:
    pump, client, flow = Pump(), Client(), new_flow()
    flow.client_lost()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    assert await asyncio.wait_for(racing(pump, stop, client, flow), 5) is End.CLIENT_GONE


@pytest.mark.parametrize(
    ("reason", "farewell"), [(End.ROUTE_CHANGED, b""), (End.TOKEN_EXPIRED, b""), (End.REVOKED, REVOKED_EVENT)]
)
@pytest.mark.asyncio
async def test_a_stream_ended_from_outside_ends_with_the_reason_and_its_farewell(reason: End, farewell: bytes) -> None:
    pump, client, flow = Pump(), Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    stream = asyncio.create_task(racing(pump, stop, client, flow))
    await pump.started.wait()
    stop.set_result(reason)
    assert await stream is reason
    assert client.sent == [{"type": "http.response.body", "body": farewell, "more_body": False}]
    assert stream.cancelling() == 0


@pytest.mark.asyncio
async def test_a_stop_that_comes_with_the_clients_going_wins() -> None:
    pump, client, flow = Pump(), Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    stream = asyncio.create_task(racing(pump, stop, client, flow))
    await pump.started.wait()
    stop.set_result(End.ROUTE_CHANGED)
    flow.client_lost()
    assert await stream is End.ROUTE_CHANGED


@pytest.mark.asyncio
async def test_a_pump_that_returns_by_itself_closed_a_slow_client() -> None:
    client, flow = Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    assert await racing(Pump(then=lambda: None), stop, client, flow) is End.SLOW_CLIENT
    assert client.sent == []


@pytest.mark.asyncio
async def test_a_client_reset_by_the_pump_itself_is_a_slow_client_and_leaves_no_cancellation_behind() -> None:
    """The flow may hear its client gone from within the pump's own step (as it did when the slow-client policy
    reset an HTTP/2 stream in the worker); the pump returns before it waits again."""
    client, flow = Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    assert await racing(Pump(then=flow.client_lost), stop, client, flow) is End.SLOW_CLIENT
    task = asyncio.current_task()
    assert task is not None
    for _ in range(3):
        await asyncio.sleep(0)  # a cancellation left pending would land here
    assert task.cancelling() == 0


@pytest.mark.asyncio
async def test_a_pump_that_raises_ends_its_stream_as_failed_with_the_response_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, flow = Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()

    def fail() -> None:
        raise RuntimeError("broken reader")

    with caplog.at_level(logging.ERROR, logger="streams.edge.race"):
        assert await racing(Pump(then=fail), stop, client, flow) is End.FAILED
    assert client.sent == [{"type": "http.response.body", "body": b"", "more_body": False}]
    (record,) = [r for r in caplog.records if r.name == "streams.edge.race"]
    assert record.getMessage() == f"stream on {TOPIC} failed"
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "broken reader"


@pytest.mark.asyncio
async def test_a_client_gone_after_its_pump_ended_cancels_nothing() -> None:
    """The pump failed; while the response's end is being sent (which waits), the client goes."""
    client, flow = Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    sending = client.send

    async def send(message: Message) -> None:
        flow.client_lost()
        await sending(message)
        await asyncio.sleep(0)

    def fail() -> None:
        raise RuntimeError("broken")

    end = await race(Pump(then=fail).run(), stop, flow=flow, receive=client.receive, send=send, topic=TOPIC)
    assert end is End.FAILED
    assert len(client.sent) == 1


@pytest.mark.asyncio
async def test_a_cancellation_from_the_server_goes_through() -> None:
    """daphne cancels an application when it stops (or gives up on one): the stream does not swallow it."""
    pump, client, flow = Pump(), Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    stream = asyncio.create_task(racing(pump, stop, client, flow))
    await pump.started.wait()
    stream.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stream
    assert flow.on_lost is None


@pytest.mark.asyncio
async def test_a_cancellation_from_the_server_with_the_clients_going_goes_through() -> None:
    pump, client, flow = Pump(), Client(), new_flow()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    stream = asyncio.create_task(racing(pump, stop, client, flow))
    await pump.started.wait()
    flow.client_lost()
    stream.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stream


@pytest.mark.asyncio
async def test_without_a_flow_a_task_watches_for_the_disconnect_and_goes_with_the_stream() -> None:
    """Another ASGI server, or a harness, hands over no flow: `http.disconnect` on `receive` ends the stream."""
    pump, client = Pump(), Client()
    stop: asyncio.Future[End] = asyncio.get_running_loop().create_future()
    before = asyncio.all_tasks()
    stream = asyncio.create_task(racing(pump, stop, client, None))
    await pump.started.wait()
    (watcher,) = pump.tasks_while_running - before - {stream}
    assert watcher.get_name() == "disconnect"
    client.messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    client.leave()
    assert await stream is End.CLIENT_GONE
    await asyncio.sleep(0)
    assert watcher.done()
    assert asyncio.all_tasks() == before


@pytest.mark.django_db(transaction=True)
def test_a_stream_whose_pump_raises_ends_as_failed_with_its_response_ended(
    endpoint: Endpoint,
    new_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, path = new_topic(), "/" + unique("failing")
    do_put_route(name=path[1:], path=path, topic=topic)

    async def broken(_pump: StreamPump, _keepalive: int) -> None:
        raise RuntimeError("a defect in the pump")

    monkeypatch.setattr(StreamPump, "run", broken)
    labels = {"route": path[1:], "reason": "failed"}
    with caplog.at_level(logging.ERROR, logger="streams.edge.race"):
        response = endpoint.call(path.encode())
    assert response.status == 200
    assert response.body.startswith(b"retry:")  # the opening went out before the pump failed
    assert REGISTRY.get_sample_value("sse_streams_closed_total", labels) == 1
    assert endpoint.runtime.stats.open_streams == 0
    assert any(r.getMessage() == f"stream on {topic} failed" for r in caplog.records)
