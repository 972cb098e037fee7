"""The challenge-response broadcast (streams/access/renewal.py) through the real Redis: a token answered to one
process renews a stream another process serves, and the token never crosses Redis in clear."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings

from bindings.services import do_put_guard, do_put_route
from tests.conftest import unique, wait_until
from tests.support.jwt_keys import guard_fields, token
from tests.support.servers import start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

CHALLENGE_RESPONSE = {"content-type": "application/x-challenge-response"}


class RedisTraffic:
    """Every command Redis runs while this is open, as its MONITOR reports them: the layer's messages as the bytes
    Redis receives, read on a connection of its own."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=10)
        if parts.password:
            self.sock.sendall(f"AUTH {parts.username or 'default'} {parts.password}\r\n".encode())
        self.sock.sendall(b"MONITOR\r\n")
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self.reader.start()
        wait_until(lambda: b"+OK" in self.text(), timeout=10)

    def _read(self) -> None:
        self.sock.settimeout(None)
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.seen += chunk

    def text(self) -> bytes:
        with self.lock:
            return bytes(self.seen)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.reader.join(timeout=10)


def test_a_renewal_answered_to_one_process_renews_another_s_stream_and_redis_never_sees_the_token(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard, challenge_s=2))
    topic = new_topic()
    path = "/" + unique("g")
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]})
    other = start_daphne({}, log_name="test-daphne-renewal-other")
    traffic = RedisTraffic(settings.REDIS_URL)
    try:
        first = token("alice", expires_in=3)
        with EventStream(daphne_url + path, headers={"authorization": f"Bearer {first}"}, timeout=8) as stream:
            assert stream.next_event(timeout=5).event == "challenge"
            renewal = token("alice", expires_in=60)
            headers = {**CHALLENGE_RESPONSE, "authorization": f"Bearer {renewal}"}
            assert httpx.post(other.url + path, headers=headers, timeout=5).status_code == 204
            time.sleep(3)  # past the first token's expiry: only the other process's broadcast kept the stream
            produce(topic, b"renewed through the other process")
            assert stream.next_event(timeout=5).text == "renewed through the other process"
        seen = traffic.text()
        assert b"streams.reauthorize" in seen, "the renewal went through this Redis"
        assert renewal.encode() not in seen, "the token crossed Redis in clear"
        assert renewal.rsplit(".", 1)[1].encode() not in seen, "its signature crossed Redis in clear"
        assert b"sealed" in seen
    finally:
        traffic.close()
        other.stop()
