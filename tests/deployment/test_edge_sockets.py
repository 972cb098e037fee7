"""The edge's Unix sockets to the workers (platform/web.py, platform/edge/haproxy.cfg): a burst of connections
larger than one socket's queue is spread over the others and every request is answered; the configuration names
each socket the supervisor opens.

A connect to a Unix socket whose queue is full fails at once, and HAProxy retries a failed connect at once: with
one socket, the requests past its queue got a 503 while the worker was busy (a reconnect storm lost streams so).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import edge_process
import pytest

from tests.support.servers import HOST, children, stop_web, web_started, workers_of

import web as web_py  # platform/web.py, on the path tests.support.servers gives platform/  # isort: skip

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 8  # each socket queues BACKLOG + 1 connections (Linux)
REQUESTS = 30  # past one queue, within the four
HELD_S = 5.0  # how long the worker accepts nothing


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: object) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    process, port = web_started(1, WEB_BACKLOG=str(BACKLOG), SSE_MAX_CONNECTIONS_PER_CLIENT="0", WEB_TLS_PORT="off")
    try:
        yield process, port
    finally:
        stop_web(process)


def test_a_burst_past_one_sockets_queue_while_the_worker_is_busy_is_all_answered(
    web: tuple[subprocess.Popen[bytes], int],
) -> None:
    process, port = web
    (worker,) = workers_of(process.pid)
    clients: list[socket.socket] = []
    os.kill(worker, signal.SIGSTOP)  # busy: it accepts nothing until it goes on
    try:
        for _ in range(REQUESTS):
            client = socket.create_connection((HOST, port), timeout=20)
            client.sendall(b"GET /-/health HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n")
            clients.append(client)
        time.sleep(HELD_S)  # past the edge's retries: a request it could not hand on has had its 503 by now
    finally:
        os.kill(worker, signal.SIGCONT)
    statuses = []
    for client in clients:
        with client:
            statuses.append(client.recv(64).split(b" ", 2)[1].decode())
    assert statuses == ["200"] * REQUESTS


def test_every_socket_keeps_the_backlog_it_was_given(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, _port = web
    edge = next(pid for pid in children(process.pid) if pid not in workers_of(process.pid))
    environ = dict(
        entry.split("=", 1) for entry in Path(f"/proc/{edge}/environ").read_text().split("\0") if "=" in entry
    )
    directory = environ["EDGE_UPSTREAM"]
    listening = subprocess.run(["ss", "-xlnH"], capture_output=True, text=True, check=True).stdout
    # A listening socket's line: type, state, queued now, the queue's length, its path, ...
    backlogs = {
        fields[4].rsplit("/", 1)[1]: int(fields[3])
        for fields in (line.split() for line in listening.splitlines())
        if len(fields) > 4 and fields[4].startswith(directory + "/")
    }
    assert backlogs == {edge_process.socket_name(index): BACKLOG for index in range(edge_process.SOCKETS)}


def test_the_sockets_go_to_the_supervisors_own_directory_unless_its_path_is_too_long(tmp_path: Path) -> None:
    assert web_py.socket_directory(tmp_path) == tmp_path
    deep = tmp_path / ("d" * 100)
    short = web_py.socket_directory(deep)
    assert short != deep
    assert short.is_dir()
    assert len(os.fsencode(short / edge_process.socket_name(edge_process.SOCKETS - 1))) <= web_py.UNIX_PATH_MAX
    short.rmdir()


def test_the_edge_forwards_to_every_socket_the_supervisor_opens_and_only_those() -> None:
    servers = re.findall(r'^\s*server \S+ "unix@\$\{EDGE_UPSTREAM\}/(\S+)"$', edge_process.CONFIG.read_text(), re.M)
    assert servers == [edge_process.socket_name(index) for index in range(edge_process.SOCKETS)]
    assert edge_process.SOCKETS >= 2
