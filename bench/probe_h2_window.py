"""Probe: many HTTP/2 streams from one address, held at a zero window, and what they cost the server.

Opens `--streams` (2 000) streams over TLS connections of up to `--per-connection` (100, h2's usual cap) streams
each, every one offering a flow-control window of 0 bytes that it never opens: the server can send response
headers, nothing more. Holds them `--hold` seconds (10), then prints how many were admitted (200), refused (a 4xx
or 5xx), reset by the server, and how many connections were refused or closed, with the server's CPU over the
hold (its processes' /proc stat: % of one core).

    .venv/bin/python bench/probe_h2_window.py                       # starts platform/web.py itself (2 workers)
    .venv/bin/python bench/probe_h2_window.py --app-dir /other/checkout   # ...from another checkout's code
    .venv/bin/python bench/probe_h2_window.py --url https://127.0.0.1:8443/items   # a server already running

Started itself, the server gets a fresh topic and a `live` route to it, the user's default settings and the
embedded services (var/services.env, as the other benchmarks). Given a URL, the server's processes are those
holding its listening socket.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import ssl
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

if __package__ in (None, ""):  # run as a script: bench/ is on sys.path, the checkout holding it is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness

ANSWER_TIMEOUT_S = 30.0


@dataclass
class Tally:
    status: dict[int, int] = field(default_factory=dict)  # stream id -> response status
    reset: set[int] = field(default_factory=set)
    streams: list[int] = field(default_factory=list)
    refused: bool = False  # the connection was closed before it could speak
    closed: bool = False  # ...or later


class ZeroWindowConnection(threading.Thread):
    """One TLS connection speaking h2, opening `count` streams with a window of 0, reading until told to stop."""

    def __init__(self, host: str, port: int, path: str, count: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.path, self.count, self.stop = host, port, path, count, stop
        self.tally = Tally()

    def run(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        try:
            raw = socket.create_connection((self.host, self.port), timeout=10)
            sock = context.wrap_socket(raw, server_hostname=self.host)
        except OSError:
            self.tally.refused = True
            return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        headers = [(":method", "GET"), (":path", self.path), (":scheme", "https"), (":authority", self.host)]
        try:
            for _ in range(self.count):
                stream = conn.get_next_available_stream_id()
                conn.send_headers(stream, headers, end_stream=True)
                self.tally.streams.append(stream)
            sock.sendall(conn.data_to_send())
            self._read(sock, conn)
        except (OSError, h2.exceptions.ProtocolError):
            self.tally.closed = True
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _read(self, sock: ssl.SSLSocket, conn: h2.connection.H2Connection) -> None:
        sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                self.tally.closed = True
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.tally.status[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.StreamReset):
                    self.tally.reset.add(event.stream_id)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.tally.closed = True
            sock.sendall(conn.data_to_send())  # acknowledgements of settings and pings only: no window is opened

    def settled(self) -> bool:
        """Every stream has an answer (or was reset), or the connection is gone."""
        tally = self.tally
        if tally.refused or tally.closed:
            return True
        return len(tally.streams) == self.count and all(s in tally.status or s in tally.reset for s in tally.streams)


# --- the server's processes -----------------------------------------------------------------------------------


def listening_pids(port: int) -> list[int]:
    """The processes holding a socket that listens on `port` (platform/web.py's workers share one)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines, None)
            for line in lines:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    return [pid for pid in all_pids() if harness.socket_inodes([pid]) & inodes]


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def cpu_seconds(pids: list[int]) -> float:
    return sum(harness.cpu_ticks(pid) or 0 for pid in pids) / harness.CLK_TCK


# --- a server of its own --------------------------------------------------------------------------------------


class OwnServer:
    """platform/web.py from `app_dir` with HTTPS, on a fresh topic and route; `url` is the route's."""

    def __init__(self, app_dir: Path, processes: int) -> None:
        harness.load_services_env()
        harness.setup_django()
        from django.conf import settings  # noqa: PLC0415  (after django.setup())

        self.bootstrap = settings.KAFKA.bootstrap_servers
        self.name = f"probe-h2-{uuid.uuid4().hex[:8]}"
        harness.create_topic(self.bootstrap, self.name)
        harness.put_route(self.name, f"/{self.name}", self.name, "live")
        self.port, self.tls_port = harness.free_port(), harness.free_port()
        python = app_dir / ".venv" / "bin" / "python"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local"),
            "LOG_LEVEL": "WARNING",
            "WEB_HOST": "127.0.0.1",
            "WEB_PORT": str(self.port),
            "WEB_TLS_PORT": str(self.tls_port),
            "WEB_PROCESSES": str(processes),
        }
        log_path = harness.ROOT / "var" / "bench" / f"{self.name}-server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(python if python.exists() else sys.executable), str(app_dir / "platform" / "web.py")]
        self.proc = harness.Proc("server", argv, log_path=log_path, env=env, cwd=app_dir)
        self.url = f"https://127.0.0.1:{self.tls_port}/{self.name}"
        self._wait_ready(processes)

    def _wait_ready(self, processes: int) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not self.proc.alive():
                sys.exit(f"the server exited:\n{self.proc.tail()}")
            # Its workers, and its edge (HAProxy, which serves HTTPS) unless the checkout predates it.
            if len(harness.children(self.proc.pid)) >= processes and listening_pids(self.tls_port):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET /-/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            time.sleep(0.3)
        sys.exit(f"the server was not ready within 90 s:\n{self.proc.tail()}")

    def pids(self) -> list[int]:
        return [self.proc.pid, *harness.children(self.proc.pid)]

    def close(self) -> None:
        self.proc.stop()
        with contextlib.suppress(Exception):
            harness.delete_route(self.name)
        with contextlib.suppress(Exception):
            harness.delete_topic(self.bootstrap, self.name)


# --- the probe ------------------------------------------------------------------------------------------------


def probe(url: str, pids: list[int], streams: int, per_connection: int, hold_s: float) -> list[tuple[str, str]]:
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 443, parts.path or "/"
    stop = threading.Event()
    full, rest = divmod(streams, per_connection)
    counts = [per_connection] * full + ([rest] if rest else [])
    connections = [ZeroWindowConnection(host, port, path, count, stop) for count in counts]
    for connection in connections:
        connection.start()
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while time.monotonic() < deadline and not all(c.settled() for c in connections):
        time.sleep(0.1)
    rss_before = sum(harness.rss_mb(pid) or 0 for pid in pids)
    before, started = cpu_seconds(pids), time.monotonic()
    time.sleep(hold_s)
    spent, held = cpu_seconds(pids) - before, time.monotonic() - started
    rss = sum(harness.rss_mb(pid) or 0 for pid in pids)
    stop.set()
    for connection in connections:
        connection.join(5)
    tallies = [c.tally for c in connections]
    statuses = [status for t in tallies for status in t.status.values()]
    return [
        ("streams asked", f"{streams} on {len(connections)} connections"),
        ("admitted (200)", str(statuses.count(200))),
        ("refused (4xx/5xx)", str(sum(1 for s in statuses if s >= 400))),
        ("reset by the server", str(sum(len(t.reset) for t in tallies))),
        ("unanswered", str(sum(len(t.streams) - len(t.status.keys() | t.reset) for t in tallies if not t.refused))),
        ("connections refused", str(sum(t.refused for t in tallies))),
        ("connections closed", str(sum(t.closed for t in tallies))),
        ("server CPU over the hold", f"{100 * spent / held:.1f} % of one core ({spent:.2f} s in {held:.1f} s)"),
        ("server RSS at the end", f"{rss:.0f} MB ({rss - rss_before:+.0f} MB over the hold)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a stream URL on a running server's HTTPS port (default: start one)")
    parser.add_argument("--app-dir", type=Path, default=harness.ROOT, help="the checkout a started server runs")
    parser.add_argument("--processes", type=int, default=2, help="web workers of a started server (default 2)")
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--per-connection", type=int, default=100)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the streams are held (default 10)")
    args = parser.parse_args()
    harness.raise_nofile()
    server = None if args.url else OwnServer(args.app_dir.resolve(), args.processes)
    try:
        url = args.url or server.url  # type: ignore[union-attr]
        pids = server.pids() if server else listening_pids(urlsplit(url).port or 443)
        if not pids:
            sys.exit(f"no process listens on {url}")
        rows = probe(url, pids, args.streams, max(1, args.per_connection), args.hold)
    finally:
        if server is not None:
            server.close()
    width = max(len(name) for name, _ in rows)
    print(f"{url}  (server processes {', '.join(map(str, pids))})")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()
