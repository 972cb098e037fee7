"""The edge's per-address connection cap for IPv6 clients, run inside a network namespace of its own
(`unshare -n python -m tests.support.edge_netns`): there, the loopback device may hold a whole IPv6 prefix
(`ip -6 route add local ... dev lo`), so connections come from many addresses of one /64 and of its neighbours,
as a client rotating through its prefix would, without touching the host's network.

It starts HAProxy with platform/edge/haproxy.cfg, as platform/web.py does, in front of a small HTTP server that
answers every request 200, then holds SSE_MAX_CONNECTIONS_PER_CLIENT connections from as many addresses of one /64
and asks, one new connection each, from the addresses given on the command line. It prints a JSON object: for each
of those addresses whether its request was answered (a refused connection is closed unanswered), then whether a
new address of the first /64 is answered once one held connection is closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "platform"))

import edge_process  # noqa: E402  # isort: skip

PREFIX = "fd00:5e::/32"  # every address of it is local in the namespace
EDGE_ADDRESS = "fd00:5e::1"
HELD_FROM = "fd00:5e:0:1::{}"  # the held connections' addresses: one /64
PATIENCE_S = 10.0


def setup_network() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "-6", "addr", "add", f"{EDGE_ADDRESS}/128", "dev", "lo", "nodad"], check=True)
    subprocess.run(["ip", "-6", "route", "add", "local", PREFIX, "dev", "lo"], check=True)
    # A client binds any address of the prefix without configuring each (this namespace's setting alone).
    Path("/proc/sys/net/ipv6/ip_nonlocal_bind").write_text("1\n")


def upstream() -> str:
    """A server that answers every request on a connection with a 200, and keeps the connection: on the Unix sockets
    the edge forwards to, in a new directory (returned)."""
    directory = tempfile.mkdtemp(prefix="edge-netns-")
    for index in range(edge_process.SOCKETS):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(f"{directory}/{edge_process.socket_name(index)}")
        listener.listen(64)
        serve_on(listener)
    return directory


def serve_on(listener: socket.socket) -> None:
    """Answer on `listener`'s connections, each in a thread."""

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the edge resets what it drops
            while data := conn.recv(65536):
                if b"\r\n\r\n" in data:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def connect(source: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect((EDGE_ADDRESS, port))
    return sock


def answered(sock: socket.socket) -> bool:
    try:
        sock.sendall(b"GET /-/health HTTP/1.1\r\nHost: edge\r\n\r\n")
        return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:  # reset: refused as soon as accepted
        return False


def answered_from(source: str, port: int) -> bool:
    try:
        sock = connect(source, port)
    except OSError:
        return False
    with sock:
        return answered(sock)


def main(argv: list[str]) -> int:
    setup_network()
    cap = int(os.environ["SSE_MAX_CONNECTIONS_PER_CLIENT"])
    with socket.socket(socket.AF_INET6) as probe:  # a free port, for the edge to listen on
        probe.bind((EDGE_ADDRESS, 0))
        port = int(probe.getsockname()[1])
    env = edge_process.environment(
        host=EDGE_ADDRESS,
        port=port,
        tls_port=None,
        pem=None,
        upstream=upstream(),
        token=edge_process.new_token(),
    )
    edge = edge_process.Edge(edge_process.find_haproxy(), env["EDGE_UPSTREAM"], None, env["EDGE_TOKEN"], env)
    edge.check()
    process = subprocess.Popen(edge.argv(), env=env)
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not answered_from(EDGE_ADDRESS, port):  # the edge listens
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("the edge did not start")
            time.sleep(0.1)
        for index in range(cap):
            sock = connect(HELD_FROM.format(index + 1), port)
            held.append(sock)
            if not answered(sock):
                raise SystemExit(f"held connection {index + 1} of {cap} was not answered")
        results = {source: answered_from(source, port) for source in argv}
        held.pop().close()
        deadline = time.monotonic() + PATIENCE_S
        while not (again := answered_from(HELD_FROM.format("ffff"), port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        print(json.dumps({"answered": results, "after_one_closed": again}))
    finally:
        for sock in held:
            sock.close()
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
