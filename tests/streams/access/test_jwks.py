"""Reading a guard's JWKS URL (streams/access/jwks.py): the whole fetch bounded in time, the document in size, https
only.

The identity provider is a local server of the test's own, which trickles, oversends or serves keys."""

from __future__ import annotations

import json
import logging
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from streams.access.jwks import JwksClient, JwksError, fetch, signing_keys
from tests.support.jwt_keys import public_jwk

Handler = Callable[[socketserver.StreamRequestHandler], None]


class Provider:
    """A TCP server answering each connection with `handler`; `gone` is set when a client hung up on it."""

    def __init__(self, handler: Handler) -> None:
        self.gone = threading.Event()
        provider = self

        class Handle(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.rfile.readline()  # the request line; the rest is not needed
                try:
                    handler(self)
                except OSError:  # the client closed the connection
                    provider.gone.set()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handle)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[Callable[[Handler], Provider]]:
    started: list[Provider] = []

    def start(handler: Handler) -> Provider:
        started.append(Provider(handler))
        return started[-1]

    yield start
    for server in started:
        server.close()


def trickle_forever(stream: socketserver.StreamRequestHandler, head: bytes) -> None:
    stream.wfile.write(head)
    while True:  # a byte every 50 ms, each socket read succeeds: only a deadline for the whole fetch ends it
        stream.wfile.write(b" ")
        stream.wfile.flush()
        time.sleep(0.05)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a:",
    ],
    ids=["body", "headers"],
)
def test_a_provider_that_trickles_is_cut_at_the_deadline(provider: Callable[[Handler], Provider], head: bytes) -> None:
    slow = provider(lambda stream: trickle_forever(stream, head))
    with pytest.raises(JwksError, match="not read within 1 s"):
        fetch(slow.url, timeout_s=1, max_bytes=256 * 1024, allow_http=True)
    assert slow.gone.wait(5)  # the connection was closed on the provider, not left trickling


def respond(body: bytes, *, length: bool = True, status: str = "200 OK") -> Handler:
    def handler(stream: socketserver.StreamRequestHandler) -> None:
        headers = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        if length:
            headers += f"content-length: {len(body)}\r\n"
        stream.wfile.write(headers.encode() + b"\r\n" + body)

    return handler


def document(padding: int = 0) -> bytes:
    return json.dumps({"keys": [public_jwk()], "padding": "x" * padding}).encode()


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "read-to-close"])
def test_a_document_over_the_limit_is_refused(provider: Callable[[Handler], Provider], length: bool) -> None:
    large = provider(respond(document(padding=300 * 1024), length=length))
    with pytest.raises(JwksError, match="than the 262144 bytes allowed"):
        fetch(large.url, timeout_s=5, max_bytes=256 * 1024, allow_http=True)
    small = provider(respond(document(), length=length))
    assert signing_keys(fetch(small.url, timeout_s=5, max_bytes=256 * 1024, allow_http=True)).keys() == {"k1"}


def test_only_https_unless_http_is_allowed_and_only_a_200(provider: Callable[[Handler], Provider]) -> None:
    keys = provider(respond(document()))
    with pytest.raises(JwksError, match="only https"):
        fetch(keys.url, timeout_s=5, max_bytes=1024 * 1024)
    moved = provider(respond(b"", status="302 Found"))  # a redirect could lead anywhere: not followed
    with pytest.raises(JwksError, match="HTTP 302"):
        fetch(moved.url, timeout_s=5, max_bytes=1024 * 1024, allow_http=True)
    with pytest.raises(JwksError, match="Port could not be cast"):  # an error of the guard's, not a crash
        fetch("https://idp.example.com:port/jwks.json", timeout_s=5, max_bytes=1024 * 1024)


def test_a_refused_document_is_logged_and_leaves_no_keys(
    provider: Callable[[Handler], Provider], caplog: pytest.LogCaptureFixture
) -> None:
    large = provider(respond(document(padding=300 * 1024)))
    client = JwksClient(large.url)
    with caplog.at_level(logging.WARNING, logger="streams.access.jwks"), pytest.raises(JwksError):
        client.signing_key("k1")
    assert "JWKS refused" in caplog.text
    assert "262144 bytes allowed" in caplog.text
    with pytest.raises(JwksError):  # until the next fetch, the keys are unavailable (503), not absent (401)
        client.signing_key("k1")
