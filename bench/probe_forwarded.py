"""Probe: does a rotated `X-Forwarded-For` from an untrusted peer escape the per-address stream limit?

Run by hand, with the services up (`make services-up`, or through `platform/with-services.sh --`)::

    .venv/bin/python bench/probe_forwarded.py                      # 50 requests, a limit of 2 per address
    .venv/bin/python bench/probe_forwarded.py --requests 200 --limit 5
    .venv/bin/python bench/probe_forwarded.py --app-dir ../other   # the server of another checkout
    .venv/bin/python bench/probe_forwarded.py --edge               # the server behind its edge, as web.py runs it

It starts one server (`python -m streams.server --proxy-headers`, the way docs/operations.md runs workers behind a
proxy) with the default `TRUSTED_PROXIES` and `SSE_MAX_STREAMS_PER_CLIENT=--limit`, on a fresh topic and route.
From 127.0.0.2 (the loopback interface answers the whole 127/8, so the peer is local but not the trusted
127.0.0.1) it opens `--requests` streams, each with a different `X-Forwarded-For: 198.51.100.x` (an attacker
rotating the address it claims), holding every admitted one open. Then it closes them all and reads the server's
access lines (`LOG_FORMAT=json`) for the addresses the server counted. The table: requests sent, admitted (200),
refused by the per-address limit (429), any other answer, and each address the server logged with its count
(a server whose stream lines carry no `client` shows "(not logged)" for them).
With forwarded headers believed from anyone, every request is admitted and the server logs the addresses the
client wrote; with them believed only from trusted proxies, `--limit` are admitted and the rest refused, all
under 127.0.0.2. With `--edge`, the server listens behind HAProxy (platform/edge/haproxy.cfg, with the token
platform/web.py would give it), and the probe talks to the edge.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    PY,
    ROOT,
    Proc,
    create_topic,
    delete_route,
    delete_topic,
    edge_command,
    free_port,
    load_services_env,
    setup_django,
)

UNTRUSTED_PEER = "127.0.0.2"
STATUS_TIMEOUT_S = 10.0


def put_limited_route(name: str, path: str, topic: str) -> None:
    from bindings.services import do_put_route  # noqa: PLC0415  (needs django.setup() first)

    do_put_route(name=name, path=path, topic=topic)


def start_server(app_dir: Path, port: int, limit: int, log_path: Path, *, edge: bool) -> list[Proc]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "0",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "SSE_MAX_STREAMS_PER_CLIENT": str(limit),
        # What is probed is the stream limit's address; the connection limit (its own bound on the socket's peer,
        # 100 by default) would close the probe's connections past 100 before they could claim an address.
        "SSE_MAX_CONNECTIONS_PER_CLIENT": "0",
    }
    upstream = free_port() if edge else port
    token = secrets.token_urlsafe(32)
    if edge:
        env["SSE_EDGE_TOKEN"] = token
    endpoint = f"tcp:port={upstream}:interface=127.0.0.1:backlog=4096"
    argv = [PY, "-m", "streams.server", "--proxy-headers", "-v", "1", "-e", endpoint, "config.asgi:application"]
    server = Proc("server", argv, log_path=log_path, env=env, cwd=app_dir)
    started = [server]
    if edge:
        where: Any = SimpleNamespace(app_dir=app_dir, out_dir=log_path.parent, run_id=log_path.stem)
        edge_argv, edge_env = edge_command("haproxy", where, port, f"127.0.0.1:{upstream}", token=token, server_env=env)
        started.append(Proc("haproxy", edge_argv, log_path=log_path.with_suffix(".edge.log"), env=edge_env))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not server.alive():
            sys.exit(f"probe_forwarded: the server exited:\n{server.tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if probe.recv(64).startswith(b"HTTP/1.1 200"):
                    return started
        except OSError:
            pass
        time.sleep(0.2)
    for proc in started:
        proc.stop()
    sys.exit(f"probe_forwarded: the server did not answer within 60 s:\n{server.tail()}")


def open_stream(port: int, path: str, forwarded_for: str) -> tuple[int, socket.socket]:
    """GET `path` from the untrusted peer claiming `forwarded_for`; the status and the socket, left open."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((UNTRUSTED_PEER, 0))
    sock.settimeout(STATUS_TIMEOUT_S)
    sock.connect(("127.0.0.1", port))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        f"X-Forwarded-For: {forwarded_for}\r\n\r\n"
    )
    sock.sendall(request.encode())
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(1024)
        if not chunk:
            break
        head += chunk
    try:
        return int(head.split(b" ", 2)[1]), sock
    except (IndexError, ValueError):
        return 0, sock


def logged_clients(log_path: Path, path: str) -> Counter[str]:
    """The `client` of every access line for `path` (a refusal's, or a stream's when it closed)."""
    clients: Counter[str] = Counter()
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("logger") == "access" and entry.get("path") == path:
            host = str(entry.get("client") or "(not logged)")
            clients[host.rsplit(":", 1)[0] if host.count(":") == 1 else host] += 1
    return clients


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=50, help="stream requests sent (default 50)")
    parser.add_argument("--limit", type=int, default=2, help="SSE_MAX_STREAMS_PER_CLIENT (default 2)")
    parser.add_argument("--app-dir", type=Path, default=ROOT, help="the checkout the server runs (default: this one)")
    parser.add_argument("--edge", action="store_true", help="the server behind HAProxy, the probe talking to it")
    args = parser.parse_args()
    load_services_env()
    setup_django()
    from django.conf import settings  # noqa: PLC0415  (after django.setup())

    bootstrap = settings.KAFKA.bootstrap_servers
    run = time.strftime("%m%d%H%M%S")
    name, path = f"probe-forwarded-{run}", f"/probe-forwarded-{run}"
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / f"{name}-server.log"
    create_topic(bootstrap, name)
    put_limited_route(name, path, name)
    port = free_port()
    servers = start_server(args.app_dir.resolve(), port, args.limit, log_path, edge=args.edge)
    statuses: Counter[int] = Counter()
    sockets = []
    try:
        for index in range(args.requests):
            status, sock = open_stream(port, path, f"198.51.{100 + index // 250}.{index % 250 + 1}")
            statuses[status] += 1
            sockets.append(sock)
    finally:
        for sock in sockets:
            sock.close()
        time.sleep(2)  # the server logs each stream as it notices its client left
        for proc in reversed(servers):
            proc.stop()
        delete_route(name)
        delete_topic(bootstrap, name)
    clients = logged_clients(log_path, path)
    other = sum(count for status, count in statuses.items() if status not in (200, 429))
    behind = " behind its edge (HAProxy)" if args.edge else ""
    print(f"server: {args.app_dir.resolve()}{behind} with --proxy-headers, TRUSTED_PROXIES default, limit {args.limit}")
    print(f"peer: {UNTRUSTED_PEER}, a different X-Forwarded-For on each request\n")
    print("| requests | admitted (200) | refused per address (429) | other | addresses the server logged |")
    print("|---:|---:|---:|---:|---|")
    top = ", ".join(f"{host} x{count}" for host, count in clients.most_common(3))
    more = f" (+{len(clients) - 3} more)" if len(clients) > 3 else ""
    print(f"| {args.requests} | {statuses[200]} | {statuses[429]} | {other} | {len(clients)}: {top}{more} |")
    print(f"\nserver log: {log_path}")


if __name__ == "__main__":
    main()
