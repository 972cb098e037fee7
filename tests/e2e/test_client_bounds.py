"""What one client address can hold of a web worker, with the settings a user gets: streams that wait on a shut
HTTP/2 window cost no CPU while they wait.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_http2 import web_with_https
from tests.e2e.test_zilla_scenarios import route
from tests.support.h2client import H2Client
from tests.support.servers import children

pytestmark = pytest.mark.django_db(transaction=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_zero_window_streams(port: int, path: str, connections: int, per_connection: int) -> list[H2Client]:
    """Clients that offer each stream a window of 0 bytes and never open it: the server can send response headers
    only. Returns them once every stream has its status."""
    clients = [H2Client(port, window=0) for _ in range(connections)]
    for client in clients:
        for _ in range(per_connection):
            client.get(path)

    def answered() -> bool:
        for client in clients:
            client.pump(timeout=0.05)
        return sum(len(client.status) for client in clients) == connections * per_connection

    wait_until(answered, timeout=30)
    return clients


def statuses(clients: list[H2Client]) -> list[int]:
    return sorted(status for client in clients for status in client.status.values())


def test_http2_streams_waiting_on_a_shut_window_cost_no_cpu(new_topic: Callable[..., str]) -> None:
    """Before, each paused stream re-armed a 20 ms timer and its pump woke every 250 ms: 100 such streams kept a
    worker busy. Now a paused stream is woken by its window opening, or when one of its bounds is due."""
    with web_with_https() as web:
        clients = open_zero_window_streams(web.tls_port, route(new_topic()), connections=2, per_connection=50)
        try:
            assert statuses(clients) == [200] * 100
            wait_until(lambda: web.health()["streams"] == 100)
            time.sleep(1)  # the streams' first writes, held by the window, have paused them all
            (worker,) = children(web.process.pid)
            before = cpu_seconds(worker)
            time.sleep(5)
            spent = cpu_seconds(worker) - before
            assert web.health()["streams"] == 100  # all held open all along
        finally:
            for client in clients:
                client.close()
    assert spent < 0.15, f"{spent:.2f} s of CPU in 5 s for 100 waiting streams"  # before: 0.30-0.32 s
