"""Changes through the API take effect in a running daphne without a restart (issue 5, item 5): a new route
serves at once, and a change closes only the streams it concerns while the others keep receiving."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from bindings.api.permissions import grant_api_writer
from bindings.services import do_put_guard, do_put_route
from tests.conftest import health, unique, wait_until
from tests.support.jwt_keys import guard_fields, token
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(daphne_url: str) -> Iterator[httpx.Client]:
    """An API client of the live server, authenticated as a machine with an admin's token."""
    admin = User.objects.create_user(unique("ci"), is_staff=True)
    grant_api_writer(admin)
    key = Token.objects.create(user=admin).key
    with httpx.Client(base_url=daphne_url, headers={"authorization": f"Token {key}"}, timeout=10) as client:
        yield client


def ended(stream: EventStream, timeout: float) -> bool:
    """True once the server ends the response (events still arriving are read and dropped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stream.next_block(timeout=max(0.05, deadline - time.monotonic()))
        except StopIteration:
            return True
        except (TimeoutError, httpx.ReadTimeout):
            return False
    return False


class Ticker:
    """Produces `tick-<n>` to a topic every 20 ms until stopped."""

    def __init__(self, produce: Callable[..., tuple[int, int]], topic: str) -> None:
        self.produce, self.topic = produce, topic
        self.sent = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.produce(self.topic, f"tick-{self.sent}".encode())
            self.sent += 1
            time.sleep(0.02)

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join(5)
        return self.sent


def test_a_route_added_through_the_api_serves_at_once(
    daphne_url: str, api: httpx.Client, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    produce(topic, b"hello")
    path = "/" + unique("new")
    with EventStream(daphne_url + "/" + unique("warm")) as warm:  # the process has a table loaded before
        assert warm.response.status_code == 404
    created = api.put(f"/api/v1/routes{path}/", json={"paths": [path], "topic": topic})
    assert created.status_code == 201, created.text
    committed = time.monotonic()
    with EventStream(daphne_url + path) as stream:  # the very first request after the commit
        assert stream.response.status_code == 200
        assert stream.next_event().text == "hello"
    print(f"first event {1000 * (time.monotonic() - committed):.0f} ms after the API answered")


def test_editing_one_route_closes_only_its_streams(
    daphne_url: str, api: httpx.Client, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    edited_topic, other_topic = new_topic(), new_topic()
    produce(edited_topic, b"old")
    edited, other = "/" + unique("edited"), "/" + unique("other")
    do_put_route(name=edited[1:], path=edited, topic=edited_topic)
    do_put_route(name=other[1:], path=other, topic=other_topic)
    closes = health(daphne_url)["closed_on_change"]
    ticker = Ticker(produce, other_topic)
    try:
        with EventStream(daphne_url + edited) as changing, EventStream(daphne_url + other) as steady:
            assert changing.next_event().text == "old"
            received = [steady.next_event().text for _ in range(5)]
            patched = api.patch(f"/api/v1/routes{edited}/", json={"filters": [{"key": "k"}]})
            assert patched.status_code == 200, patched.text
            assert ended(changing, timeout=5), "the edited route's stream was not closed"
            time.sleep(0.5)  # the other stream keeps receiving through and after the change
            sent = ticker.stop()
            while len(received) < sent:
                received.append(steady.next_event(timeout=5).text)
        assert received == [f"tick-{n}" for n in range(sent)]  # no gap, no duplicate, never reconnected
        assert health(daphne_url)["closed_on_change"] == closes + 1
        # The client reconnects under the new filter: the keyless message no longer matches.
        produce(edited_topic, b"new", key=b"k")
        with EventStream(daphne_url + edited) as again:
            assert again.next_event().text == "new"
    finally:
        ticker.stop()


def test_deleting_a_route_or_changing_its_guard_closes_its_streams(
    daphne_url: str, api: httpx.Client, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    produce(topic, b"m")
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard))
    guarded, removed, untouched = "/" + unique("guarded"), "/" + unique("removed"), "/" + unique("untouched")
    do_put_route(name=guarded[1:], path=guarded, topic=topic, guarded={guard: []})
    do_put_route(name=removed[1:], path=removed, topic=topic)
    do_put_route(name=untouched[1:], path=untouched, topic=topic)
    auth = {"authorization": f"Bearer {token()}"}
    with (
        EventStream(daphne_url + guarded, headers=auth) as on_guard,
        EventStream(daphne_url + removed) as on_removed,
        EventStream(daphne_url + untouched) as on_untouched,
    ):
        for stream in (on_guard, on_removed, on_untouched):
            assert stream.next_event().text == "m"
        fields = guard_fields(guard, audience="another-audience")
        assert api.put(f"/api/v1/guards/{guard}/", json={k: v for k, v in fields.items() if k != "name"}).is_success
        assert ended(on_guard, timeout=5)
        assert api.delete(f"/api/v1/routes{removed}/").status_code == 204
        assert ended(on_removed, timeout=5)
        produce(topic, b"still here")
        assert on_untouched.next_event().text == "still here"
    # The old token is for the old audience: reconnecting is refused now.
    assert httpx.get(daphne_url + guarded, headers=auth, timeout=5).status_code == 401
    wait_until(lambda: httpx.get(daphne_url + removed, timeout=5).status_code == 404, timeout=2)


def test_a_stream_outlives_changes_that_do_not_concern_it(
    daphne_url: str, api: httpx.Client, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    produce(topic, b"m")
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard))
    name = unique("paths")
    kept, dropped = f"/{name}/kept", f"/{name}/dropped"
    do_put_route(name=name, paths=[kept, dropped], topic=topic, guarded={guard: []})
    auth = {"authorization": f"Bearer {token()}"}
    with (
        EventStream(daphne_url + kept, headers=auth) as on_kept,
        EventStream(daphne_url + dropped, headers=auth) as on_dropped,
    ):
        for stream in (on_kept, on_dropped):
            assert stream.next_event().text == "m"
        closes = health(daphne_url)["closed_on_change"]
        # A new path, and a guard's cookie: neither changes what the open streams get or who may have them.
        assert api.patch(f"/api/v1/routes/{name}/", json={"paths": [kept, dropped, f"/{name}/new"]}).is_success
        assert api.patch(f"/api/v1/guards/{guard}/", json={"cookie": "sse"}).is_success
        produce(topic, b"after both")
        assert on_kept.next_event().text == "after both"
        assert on_dropped.next_event().text == "after both"
        # Dropping the path one stream uses closes that stream only.
        assert api.patch(f"/api/v1/routes/{name}/", json={"paths": [kept]}).is_success
        assert ended(on_dropped, timeout=5)
        produce(topic, b"after the drop")
        assert on_kept.next_event().text == "after the drop"
    assert health(daphne_url)["closed_on_change"] == closes + 1
