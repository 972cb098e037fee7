"""Streams opened and closed by the hundred leave nothing behind in their process (docs/operations.md, "Memory").

A web process serves clients that come and go for days: whatever it keeps per client address, per identity, per
stream or per task must go when the stream does, or memory grows with every client ever seen. The real endpoint
runs in process (tests/support/fuzz.py) over real routes, a real JWT guard and the real broker; each request streams,
reads its first chunk and disconnects.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

import pytest

from bindings.services import do_put_guard, do_put_route
from streams.edge.endpoint import Stream
from streams.events.subscription import Subscription
from streams.hub.hub import current_hub
from streams.stream.pump import Pump
from tests.conftest import unique
from tests.support.fuzz import Endpoint, endpoint
from tests.support.jwt_keys import guard_fields, token

__all__ = ["endpoint"]  # the fixture, imported for pytest

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 120


def live_objects(*kinds: type) -> int:
    gc.collect()
    # type(), not isinstance(): isinstance reads __class__, which a dead weakref.proxy answers with ReferenceError.
    return sum(1 for found in gc.get_objects() if issubclass(type(found), kinds))


def test_it_forgets_every_client_identity_and_stream_once_they_close(
    endpoint: Endpoint, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=2)
    for partition in (0, 1):
        produce(topic, b'{"n":1}', partition=partition)
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard, challenge_s=30))
    plain, guarded = "/" + unique("open"), "/" + unique("guarded")
    do_put_route(name=plain[1:], path=plain, topic=topic)
    do_put_route(name=guarded[1:], path=guarded, topic=topic, guarded={guard: ["read"]})

    first = [(b"authorization", f"Bearer {token('first', expires_in=600)}".encode())]
    # The listeners, the hub and its janitor start with the first streams, and stay.
    assert endpoint.call(plain.encode()).status == 200
    assert endpoint.call(guarded.encode(), headers=first).status == 200
    runtime = endpoint.runtime

    async def tasks() -> list[str]:
        """The tasks of streams besides their own: the watcher of a client's disconnect, which a stream starts when
        its server hands over no flow, as this harness does."""
        names = [task.get_name() for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        return [name for name in names if name == "disconnect"]

    for n in range(STREAMS):
        client = f"10.1.{n // 250}.{n % 250}"
        assert endpoint.call(plain.encode(), client=client).status == 200
        bearer = [(b"authorization", f"Bearer {token(f'user-{n}', expires_in=600)}".encode())]
        assert endpoint.call(guarded.encode(), client=client, headers=bearer).status == 200

    assert runtime.stats.open_streams == 0
    assert runtime.limits.open == 0
    assert dict(runtime.limits.by_client) == {}
    assert dict(runtime.limits.by_identity) == {}
    assert runtime.open_streams.by_route == {}
    assert runtime.renewals.streams == set()

    async def hub_state() -> tuple[dict[str, int], int]:
        hub = current_hub()
        assert hub is not None
        return {name: len(state.subscribers) for name, state in hub.topics.items()}, len(hub.stalls._quiet)

    subscribers, watched = endpoint.loop_thread.run(hub_state())
    assert subscribers == {topic: 0}
    assert watched == 0
    assert endpoint.loop_thread.run(tasks()) == []
    assert live_objects(Stream, Pump, Subscription) == 0
