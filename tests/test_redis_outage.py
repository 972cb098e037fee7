"""Redis unreachable (a TCP proxy of the test's own, cut and restored): streams go on, and a route changed while
the process could not hear announcements closes its streams once Redis is back, with no request needed."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.conf import settings

from bindings.services import do_put_route
from tests.conftest import unique
from tests.servers import DaphneServer, TcpProxy, start_daphne
from tests.sse_client import EventStream
from tests.test_live_changes import ended

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def behind_a_cuttable_redis() -> Iterator[tuple[DaphneServer, TcpProxy]]:
    redis_url = settings.REDIS_URL
    host_port, _, database = redis_url.removeprefix("redis://").partition("/")
    proxy = TcpProxy(int(host_port.rsplit(":", 1)[1]))
    server = start_daphne({"REDIS_URL": f"redis://{proxy.address}/{database}"}, log_name="test-daphne-redis-outage")
    try:
        yield server, proxy
    finally:
        server.stop()
        proxy.close()


def test_streams_go_on_without_redis_and_a_change_made_meanwhile_applies_once_it_is_back(
    behind_a_cuttable_redis: tuple[DaphneServer, TcpProxy],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    server, proxy = behind_a_cuttable_redis
    first, second = new_topic(), new_topic()
    name = unique("redis")
    do_put_route(name=name, path=f"/{name}", topic=first)
    with EventStream(f"{server.url}/{name}", timeout=20) as stream:
        produce(first, b"one")
        assert stream.next_event().text == "one"
        proxy.cut()
        produce(first, b"two")
        assert stream.next_event().text == "two"  # the data path needs no Redis
        do_put_route(name=name, path=f"/{name}", topic=second)  # announced to a process that cannot hear it
        assert not ended(stream, timeout=2), "nothing told the process yet"
        proxy.restore()
        assert ended(stream, timeout=15), "the change made during the outage did not close the stream"
    produce(second, b"from the new topic")
    with EventStream(f"{server.url}/{name}") as resumed:
        assert resumed.next_event().text == "from the new topic"
