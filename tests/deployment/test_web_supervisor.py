"""platform/web.py, the web workers' supervisor: the behaviour docs/decisions/0006 chose it for.

It starts its workers on one shared socket (with two malloc arenas each), stops them all on SIGTERM with status 0,
replaces a worker that dies, gives up with status 1 when workers keep dying at start, and takes its workers down
when it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest
from embedded import pid_alive

from tests.conftest import wait_until
from tests.support.servers import HOST, children, free_port, healthy, start_web

pytestmark = pytest.mark.django_db(transaction=True)


def test_sigterm_stops_every_worker_and_exits_0(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    workers = children(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert not any(pid_alive(pid) for pid in workers)
    assert not healthy(port)


def test_a_worker_that_dies_is_replaced_and_the_port_keeps_answering(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    victim, survivor = sorted(children(process.pid))
    os.kill(victim, signal.SIGKILL)
    assert healthy(port)  # the other worker answers meanwhile, on the same socket
    wait_until(lambda: len(children(process.pid)) == 2 and victim not in children(process.pid), timeout=30)
    assert survivor in children(process.pid)
    assert process.poll() is None


def test_killing_the_supervisor_takes_its_workers_down(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    workers = children(process.pid)
    process.kill()
    process.wait()
    wait_until(lambda: not any(pid_alive(pid) for pid in workers), timeout=20)  # no orphan keeps the port
    assert not healthy(port)


def test_workers_that_keep_dying_at_start_make_it_exit_1() -> None:
    process = start_web(free_port(), WEB_SERVER_MODULE="streams.no_such_module", WEB_MAX_RESTARTS="3")
    started = time.monotonic()
    try:
        assert process.wait(timeout=60) == 1
    finally:
        if process.poll() is None:
            process.kill()
    assert time.monotonic() - started < 60


def test_a_worker_keeps_what_it_loaded_out_of_the_collectors_full_passes(
    web: tuple[subprocess.Popen[bytes], int],
) -> None:
    """streams/server/daphne.py freezes the objects loaded before it serves: a full collection then skips them."""
    _process, port = web
    frozen = httpx.get(f"http://{HOST}:{port}/-/health", timeout=5).json()["gc_frozen_objects"]
    assert frozen > 50_000  # Django, Twisted and the application


def test_workers_run_with_two_malloc_arenas_and_glibcs_allocator(web: tuple[subprocess.Popen[bytes], int]) -> None:
    """Fewer glibc arenas, and every object from glibc, keep less freed memory (docs/operations.md, "Memory"); an
    operator's own values win."""
    process, _port = web
    arenas = os.environ.get("MALLOC_ARENA_MAX", "2").encode()
    allocator = os.environ.get("PYTHONMALLOC", "malloc").encode()
    workers = children(process.pid)
    assert len(workers) == 2
    for pid in workers:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            variables = environ.read().split(b"\0")
        assert b"MALLOC_ARENA_MAX=" + arenas in variables
        assert b"PYTHONMALLOC=" + allocator in variables
