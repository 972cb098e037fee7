"""JWKS fetches isolated per guard (streams/access/jwks.py): an identity provider that hangs holds up the streams
of its own guards only. Both providers are local HTTP servers of the test's own."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from bindings.services import do_put_guard, do_put_route
from tests.conftest import unique, wait_until
from tests.support.jwt_keys import guard_fields, public_jwk, token
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


class Provider:
    """A JWKS endpoint that serves the test's key, or, while `hanging`, holds each request until `release`."""

    def __init__(self, *, hanging: bool) -> None:
        self.released = threading.Event()
        self.waiting = 0  # requests held now
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if hanging:
                    with provider.lock:
                        provider.waiting += 1
                    provider.released.wait(120)
                    self.send_error(503)
                    return
                body = json.dumps({"keys": [public_jwk()]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def patient_server() -> Iterator[DaphneServer]:
    """daphne that waits the longest a JWKS fetch may take (60 s), so a hung provider stays hung through the test."""
    server = start_daphne({"SSE_JWKS_TIMEOUT_S": "60"}, log_name="test-daphne-jwks-isolation")
    try:
        yield server
    finally:
        server.stop()


def route_of(topic: str, provider: Provider) -> str:
    guard = unique("jwks")
    do_put_guard(**guard_fields(guard, keys=[], jwks_url=provider.url))
    path = "/" + unique("g")
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]})
    return path


def test_a_hanging_identity_provider_holds_up_its_own_guards_only(
    patient_server: DaphneServer, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    slow, fast = Provider(hanging=True), Provider(hanging=False)
    answers: list[int] = []
    try:
        topic = new_topic()
        # Two guards on the hanging provider: two fetches hung at once, as many as the one shared pool had threads.
        slow_paths = [route_of(topic, slow), route_of(topic, slow)]
        fast_path = route_of(topic, fast)
        bearer = {"authorization": f"Bearer {token('alice')}"}

        def ask(path: str) -> None:
            answers.append(httpx.get(patient_server.url + path, headers=bearer, timeout=150).status_code)

        waiting = [threading.Thread(target=ask, args=(path,), daemon=True) for path in slow_paths]
        for thread in waiting:
            thread.start()
        wait_until(lambda: slow.waiting == 2, timeout=30)
        with EventStream(patient_server.url + fast_path, headers=bearer, timeout=30) as stream:
            assert stream.next_block().retry is not None  # served while the other provider still hangs
            produce(topic, b"the fast guard's stream flows")
            assert stream.next_event().text == "the fast guard's stream flows"
        assert answers == [], "the hanging provider's requests are still waiting"
        slow.release()
        for thread in waiting:
            thread.join(timeout=60)
        assert answers == [503, 503]  # its keys cannot be read: its guards' requests are refused, not served
    finally:
        slow.close()
        fast.close()
