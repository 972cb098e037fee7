"""What the fuzz tests (tests/fuzz/test_*.py) share: their hypothesis budget and an in-process client of the stream
endpoint.

The budget is a registered profile, `fuzz`: no deadline (the first example of a test pays for imports and
connections), reproducible examples (`derandomize`, so CI fails on the same input every run) and no example
database in the repository. `PURE` (pure functions) and `REQUESTS` (a call of the real endpoint or API) fix the
number of examples per test; every fuzz test runs in the normal suite.

`mutate()` makes wrong types at every level of a valid document (a REST body, a zilla.yaml, an AsyncAPI
document): values replaced, keys removed or renamed, anywhere in the tree.

`call()` drives the real `StreamEndpoint` in the test process, over the real Postgres routes and the real broker,
as daphne would: it sends the request, reads the response head and first chunk, then disconnects. A response that
takes longer than `CALL_TIMEOUT_S` fails the test: a hang is a defect like a 500.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from streams.codecs.asgi import Message
from streams.edge.endpoint import StreamEndpoint
from streams.edge.runtime import Runtime
from streams.hub.hub import current_hub
from tests.support.inprocess import LoopThread

settings.register_profile(
    "fuzz",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    # Request-level tests share a function-scoped database and event loop across examples, on purpose.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
PURE = settings(settings.get_profile("fuzz"), max_examples=200)
REQUESTS = settings(settings.get_profile("fuzz"), max_examples=40)

CALL_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def problem(self) -> dict[str, Any]:
        """The RFC 9457 body of an error response, checked for its required members."""
        assert self.headers[b"content-type"] == b"application/problem+json", self
        found: dict[str, Any] = json.loads(self.body)
        assert found["status"] == self.status
        assert isinstance(found["title"], str)
        assert isinstance(found["detail"], str)
        return found


class Endpoint:
    """The stream endpoint of a `Runtime` of its own, on an event loop in a thread (as daphne runs it)."""

    def __init__(self, loop_thread: LoopThread) -> None:
        self.loop_thread = loop_thread
        # Blocking calls off the loop (route loads) in one thread, whose database connection close() can close.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fuzz-sync")
        loop_thread.loop.set_default_executor(self.executor)
        self.runtime = Runtime()
        self.app = StreamEndpoint(get_asgi_application(), self.runtime)

    def call(
        self,
        path: bytes,
        *,
        method: str = "GET",
        query: bytes = b"",
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        client: str = "127.0.0.1",
    ) -> Response:
        """One request from `client`; `path` is the raw (still percent-encoded, ASCII) path, as daphne passes it."""
        return self.loop_thread.run(
            self._call(method, path, query, headers or [], body, client=client), timeout=CALL_TIMEOUT_S + 5
        )

    async def _call(
        self, method: str, path: bytes, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes, *, client: str
    ) -> Response:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(path.decode("ascii")),  # as daphne decodes it
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": (client, 50000),
            "server": ("127.0.0.1", 8000),
        }
        started: dict[str, Any] = {}
        chunks: list[bytes] = []
        answered = asyncio.Event()
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": body, "more_body": False}
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                answered.set()  # a stream's first chunk is enough: the client goes

        await asyncio.wait_for(self.app(scope, receive, send), CALL_TIMEOUT_S)
        assert started, "the endpoint returned without a response"
        return Response(
            started["status"], {bytes(k).lower(): bytes(v) for k, v in started["headers"]}, b"".join(chunks)
        )

    def close(self) -> None:
        async def stop() -> None:
            hub = current_hub()
            if hub is not None:
                await hub.stop()
            current = asyncio.current_task()
            pending = [task for task in asyncio.all_tasks() if task is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            # The connections Django opened in the threads it ran the routes' query and its own views in.
            await asyncio.get_running_loop().run_in_executor(self.executor, connections.close_all)
            await sync_to_async(connections.close_all)()

        self.loop_thread.run(stop())
        self.executor.shutdown()
        self.runtime.delivery_log.close()  # its writer thread, started by the first refusal or stream


def request_then_leave(leave: asyncio.Event) -> Callable[[], Awaitable[dict[str, object]]]:
    """An ASGI `receive` for a stream request that stays: its empty request, then its client's going once `leave` is
    set."""
    requested = False

    async def receive() -> dict[str, object]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    return receive


@pytest.fixture
def endpoint(loop_thread: LoopThread, transactional_db: None) -> Iterator[Endpoint]:
    """The real stream endpoint in process; its hub is stopped when the test ends."""
    found = Endpoint(loop_thread)
    try:
        yield found
    finally:
        found.close()


def locations(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a document, the root included."""
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from locations(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from locations(value, (*path, index))


def mutate(document: Any, data: st.DataObject, times: int, values: st.SearchStrategy[Any]) -> Any:
    """A copy of `document` with `times` places replaced by one of `values`, removed, or (in a mapping) renamed:
    wrong types at every level of a valid document."""
    document = copy.deepcopy(document)
    for _ in range(times):
        places = list(locations(document))
        path = data.draw(st.sampled_from(places), label="where")
        value = copy.deepcopy(data.draw(values, label="what"))  # a later mutation may change it
        if not path:
            document = value
            continue
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = data.draw(st.sampled_from(["replace", "remove", "rename"]), label="how")
        if action == "remove":
            del parent[key]
        elif action == "rename" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from([None, 0, "", "x" * 300, "é", "t"]), label="to")] = parent.pop(key)
        else:
            parent[key] = value
    return document


def assert_not_a_server_error(response: Response) -> None:
    """A request is never answered with a 5xx because of what it contains (docs/contract.md §2); an error is a
    problem body."""
    assert response.status < 500, response
    if response.status >= 400:
        response.problem()
