"""Small local HTTP servers for the registry client's tests: what stands between the platform and its registry
(an authorizing gateway in front of the real registry, a redirect to a third party) and the third party itself.
None of them stands in for the registry: the gateway forwards to the tests' real one.

Each runs in a thread on 127.0.0.1, on a free port, for the length of a `with` block.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handler = Callable[[BaseHTTPRequestHandler], None]


@contextlib.contextmanager
def serving(handle: Handler) -> Iterator[str]:
    """A server answering every GET with `handle(request)`: its base URL."""

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def reply(request: BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    request.send_response(status)
    for name, value in {"Content-Type": "application/json", **headers}.items():
        request.send_header(name.replace("_", "-"), value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


@contextlib.contextmanager
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A third party that notes the headers of every request it gets (and answers 404): its URL, and the notes."""
    heard: list[dict[str, str]] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        heard.append({"path": request.path, **dict(request.headers.items())})
        reply(request, 404, b'{"error_code": 40403, "message": "not here"}')

    with serving(handle) as url:
        yield url, heard


@contextlib.contextmanager
def redirector(target: str) -> Iterator[str]:
    """A server that answers every request with a 302 to the same path at `target`."""
    with serving(lambda request: reply(request, 302, Location=target + request.path)) as url:
        yield url


@contextlib.contextmanager
def gateway(upstream: str, forbidden: set[int]) -> Iterator[str]:
    """An authorizing gateway in front of the registry at `upstream` (its base URL, with the API's path): what
    is asked of the schema ids in `forbidden` gets a 403, everything else the registry's own answer."""
    prefix = upstream.split("/", 3)[3] if upstream.count("/") >= 3 else ""

    def handle(request: BaseHTTPRequestHandler) -> None:
        path = request.path.removeprefix("/" + prefix) if prefix else request.path
        if any(path == f"/schemas/ids/{id_}" or path.startswith(f"/schemas/ids/{id_}/") for id_ in forbidden):
            reply(request, 403, b'{"error_code": 40301, "message": "not for you"}')
            return
        try:
            with urllib.request.urlopen(upstream + path, timeout=10) as answer:
                reply(request, answer.status, answer.read())
        except urllib.error.HTTPError as error:
            with error:
                reply(request, error.code, error.read())

    with serving(handle) as url:
        yield f"{url}/{prefix}" if prefix else url


@contextlib.contextmanager
def dripping(seconds: float) -> Iterator[str]:
    """A server that answers 200 and then sends its body a byte every 0.2 s, for up to `seconds`."""
    stop = threading.Event()

    def handle(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.end_headers()
        deadline = time.monotonic() + seconds
        with contextlib.suppress(OSError):
            while time.monotonic() < deadline and not stop.wait(0.2):
                request.wfile.write(b" ")
                request.wfile.flush()

    with serving(handle) as url:
        try:
            yield url
        finally:
            stop.set()
