"""An HTTP/2 client over TLS for tests that need control over flow control, stream by stream (the `h2` library).

It reads the socket only when pumped, and opens the flow-control window only of the streams it is not told to
stall: a stalled stream's bytes stay unacknowledged, as in a browser tab whose page stopped reading one stream,
while the connection and the other streams go on. `hold()` stops reading the socket altogether.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from tests.support.sse_client import Event, parse_block

HOST = "127.0.0.1"


def tls_context(alpn: list[str]) -> ssl.SSLContext:
    """A client context that accepts the development certificate (self-signed) and offers `alpn`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(alpn)
    return context


class H2Client:
    def __init__(self, port: int, *, window: int = 65535, rcvbuf: int = 0) -> None:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        raw.connect((HOST, port))
        self.sock = tls_context(["h2"]).wrap_socket(raw, server_hostname="localhost")
        self.alpn = self.sock.selected_alpn_protocol()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        if window > 65535:
            self.conn.increment_flow_control_window(window - 65535)  # the connection's window too
        self._flush()
        self.status: dict[int, int] = {}
        self._pending: dict[int, bytes] = {}  # per stream, what follows its last complete event
        self._events: dict[int, list[Event]] = {}
        self.received: dict[int, int] = {}  # flow-controlled bytes, per stream
        self.reset: set[int] = set()
        self.ended: set[int] = set()
        self.stalled: set[int] = set()
        self.lost = False
        self._lock = threading.Lock()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def get(self, path: str) -> int:
        """Open a stream with a GET of `path`; returns its id."""
        with self._lock:
            stream = self.conn.get_next_available_stream_id()
            headers = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", f"{HOST}")]
            self.conn.send_headers(stream, headers, end_stream=True)
            self._flush()
            self._pending[stream], self._events[stream] = b"", []
            return stream

    def stall(self, stream: int) -> None:
        """Stop opening `stream`'s window: the server can send it no more than its window."""
        self.stalled.add(stream)

    def open_window(self, stream: int, size: int) -> None:
        """Let the server send `stream` `size` more bytes (a stalled stream's reader taking a little)."""
        with self._lock:
            self.conn.increment_flow_control_window(size, stream)
            self._flush()

    def cancel(self, stream: int) -> None:
        """Reset `stream` (RST_STREAM, CANCEL), as a browser does when a page closes one `EventSource`."""
        with self._lock:
            self.conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
            self._flush()

    def pump(self, timeout: float) -> None:
        """Read and handle what arrives within `timeout`."""
        deadline = time.monotonic() + timeout
        while not self.lost and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                return
            except OSError:
                self.lost = True
                return
            if not data:
                self.lost = True
                return
            with self._lock:
                self._handle(self.conn.receive_data(data))
                self._flush()

    def _handle(self, events: list[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                self.status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                self._received(event.stream_id, event.data)
                size = event.flow_controlled_length
                self.received[event.stream_id] = self.received.get(event.stream_id, 0) + size
                if not size:
                    pass  # an empty DATA frame (a body's end) takes no window
                elif event.stream_id in self.stalled:
                    self.conn.increment_flow_control_window(size)  # the connection's window only
                else:
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self.conn.acknowledge_received_data(size, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.reset.add(event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.lost = True

    def _received(self, stream: int, data: bytes) -> None:
        *blocks, self._pending[stream] = (self._pending.get(stream, b"") + data).split(b"\n\n")
        self._events.setdefault(stream, []).extend(e for e in map(parse_block, blocks) if e.is_event)

    def events(self, stream: int) -> list[Event]:
        """The complete events received on `stream` so far."""
        return list(self._events.get(stream, []))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Pumping:
    """Pump `client` in a thread of its own until closed (the test's thread produces meanwhile)."""

    def __init__(self, client: H2Client) -> None:
        self.client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="h2-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and not self.client.lost:
            self.client.pump(timeout=0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
