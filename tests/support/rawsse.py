"""A raw-socket SSE client for tests that need control over reading: one that stalls, or reads only later.

httpx reads ahead into its own buffers; this client reads the socket only when told to, so a stalled client
really leaves the bytes in the kernel and the server sees its connection fill up.
"""

from __future__ import annotations

import socket
import ssl
import time

from tests.support.sse_client import Event, parse_block


class RawStream:
    def __init__(
        self,
        port: int,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        rcvbuf: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(("127.0.0.1", port))
        self.sock = tls.wrap_socket(sock, server_hostname="localhost") if tls else sock
        lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self._raw = b""
        self._body = b""
        self._headers_done = False
        self.closed = False
        self.status = 0

    def close(self) -> None:
        self.sock.close()

    def pump(self, timeout: float) -> None:
        """Read what arrives within `timeout` (until the peer closes or resets)."""
        deadline = time.monotonic() + timeout
        while not self.closed and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                break
            except OSError:  # reset by the server: what was not read yet is gone, as for a browser
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            self._raw += data
            self._dechunk()

    def _dechunk(self) -> None:
        if not self._headers_done:
            head, sep, rest = self._raw.partition(b"\r\n\r\n")
            if not sep:
                return
            self.status = int(head.split(b" ", 2)[1])
            self._headers_done, self._raw = True, rest
        while True:
            size_line, sep, rest = self._raw.partition(b"\r\n")
            if not sep:
                return
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            self._body += rest[:size]
            self._raw = rest[size + 2 :]
            if size == 0:
                self.closed = True
                return

    def events(self) -> list[Event]:
        """The complete events received so far (a partial last one is left out)."""
        blocks = self._body.split(b"\n\n")[:-1]
        return [event for event in map(parse_block, blocks) if event.is_event]
