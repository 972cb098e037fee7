"""Redis unreachable (a TCP proxy of the test's own, cut and restored): streams go on, a route changed while
the process could not hear announcements closes its streams once Redis is back, with no request needed, and
challenge responses renew streams during the outage and as soon as it ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import jwt
import pytest
from django.conf import settings

from bindings.services import do_put_guard, do_put_route
from tests.conftest import unique
from tests.e2e.test_live_changes import ended
from tests.support.jwt_keys import guard_fields, token
from tests.support.servers import DaphneServer, TcpProxy, start_daphne
from tests.support.sse_client import EventStream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]


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


def answer_challenge(server: DaphneServer, path: str, new_token: str) -> None:
    """POST a challenge response: 204 within 2 s, Redis or not."""
    headers = {"content-type": "application/x-challenge-response", "authorization": f"Bearer {new_token}"}
    started = time.monotonic()
    response = httpx.post(server.url + path, headers=headers, timeout=10)
    assert response.status_code == 204
    assert time.monotonic() - started < 2, "the challenge response waited on Redis"


def past_expiry(signed: str) -> None:
    time.sleep(max(0.0, jwt.decode(signed, options={"verify_signature": False})["exp"] - time.time() + 0.5))


def test_challenge_responses_renew_streams_while_redis_is_cut_and_as_soon_as_it_is_back(
    behind_a_cuttable_redis: tuple[DaphneServer, TcpProxy],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    server, proxy = behind_a_cuttable_redis
    guard, topic = unique("jwt"), new_topic()
    do_put_guard(**guard_fields(guard, challenge_s=2))
    name = unique("renew")
    do_put_route(name=name, path=f"/{name}", topic=topic, guarded={guard: ["read"]})
    # Challenged 2 s before each exp: the first at +2 s, the second at +10 s (exp is whole seconds).
    first, second, third = token("alice", expires_in=4), token("alice", expires_in=12), token("alice", expires_in=60)
    with EventStream(f"{server.url}/{name}", headers={"authorization": f"Bearer {first}"}, timeout=20) as stream:
        produce(topic, b"one")
        assert stream.next_event(timeout=5).text == "one"
        assert stream.next_event(timeout=5).event == "challenge"
        proxy.cut()  # the process's listeners fail now and try again every 5 s: at +7 s, +12 s
        answer_challenge(server, f"/{name}", second)  # no broadcast can be sent: this process renews its own
        past_expiry(first)
        produce(topic, b"two")
        assert stream.next_event(timeout=5).text == "two"
        assert stream.next_event(timeout=10).event == "challenge"
        proxy.restore()  # and answered at once, while the process has not joined the announcements again
        answer_challenge(server, f"/{name}", third)
        past_expiry(second)
        produce(topic, b"three")
        assert stream.next_event(timeout=5).text == "three"  # the next event: nothing lost or repeated


def test_a_challenge_response_renews_the_stream_when_redis_is_silent(
    behind_a_cuttable_redis: tuple[DaphneServer, TcpProxy],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    """Redis unanswering rather than gone (a partition): the broadcast waits a bounded time, then this process
    renews its own streams before the old token expires."""
    server, proxy = behind_a_cuttable_redis
    guard, topic = unique("jwt"), new_topic()
    do_put_guard(**guard_fields(guard, challenge_s=2))
    name = unique("renew")
    do_put_route(name=name, path=f"/{name}", topic=topic, guarded={guard: ["read"]})
    first = token("alice", expires_in=4)
    with EventStream(f"{server.url}/{name}", headers={"authorization": f"Bearer {first}"}, timeout=20) as stream:
        assert stream.next_event(timeout=5).event == "challenge"
        proxy.stall()
        answer_challenge(server, f"/{name}", token("alice", expires_in=60))
        past_expiry(first)
        produce(topic, b"after the first token expired")
        assert stream.next_event(timeout=5).text == "after the first token expired"
        proxy.restore()
