"""platform/web.py, the web workers' supervisor: the behaviour docs/decisions/0006 chose it for.

It starts its workers on one shared socket (with two malloc arenas each), stops them all on SIGTERM with status 0,
replaces a worker that dies after a wait that doubles while the worker keeps dying (never stopping the others,
never giving up), and takes its workers down when it is killed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable
from functools import partial

import httpx
import pytest
from embedded import pid_alive

from tests.conftest import wait_until
from tests.support.servers import (
    HOST,
    SUPERVISOR_LOG,
    VAR,
    free_port,
    healthy,
    start_web,
    stop_web,
    web_started,
    workers_of,
)

import web  # platform/web.py, on the path tests.support.servers gives platform/  # isort: skip

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]


def test_sigterm_stops_every_worker_and_exits_0(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    workers = workers_of(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert not any(pid_alive(pid) for pid in workers)
    assert not healthy(port)


def test_a_worker_that_dies_is_replaced_and_the_port_keeps_answering(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    victim, survivor = sorted(workers_of(process.pid))
    os.kill(victim, signal.SIGKILL)
    assert healthy(port)  # the other worker answers meanwhile, on the same socket
    wait_until(lambda: len(workers_of(process.pid)) == 2 and victim not in workers_of(process.pid), timeout=30)
    assert survivor in workers_of(process.pid)
    assert process.poll() is None


def test_killing_the_supervisor_takes_its_workers_down(web: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = web
    workers = workers_of(process.pid)
    process.kill()
    process.wait()
    wait_until(lambda: not any(pid_alive(pid) for pid in workers), timeout=20)  # no orphan keeps the port
    assert not healthy(port)


def test_a_slots_wait_doubles_up_to_its_cap_and_starts_over_after_a_worker_that_lived() -> None:
    slot, now, found = web.Slot(), 0.0, []
    for _ in range(9):  # each worker dies as it starts
        slot.started_at = now
        found.append(slot.backoff(now, 60.0))
        now += found[-1]
    assert found == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    slot.started_at = now
    assert slot.backoff(now + web.STABLE_AFTER_S, 60.0) == 1  # this one lived: not a crash loop
    slot.started_at = now + web.STABLE_AFTER_S + 1  # its successor dies as it starts: the wait doubles again
    assert slot.backoff(slot.started_at, 60.0) == 2


def supervisor_log_from_here() -> Callable[[], str]:
    """What platform/web.py processes started from now on log (start_web appends to one file)."""
    path = SUPERVISOR_LOG
    VAR.mkdir(exist_ok=True)
    offset = path.stat().st_size if path.exists() else 0

    def read() -> str:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    return read


def waits(log: str, slot: int) -> list[float]:
    """The restart waits the supervisor logged for a slot, in order."""
    return [
        float(wait) for wait in re.findall(rf"worker {slot} \(pid \d+\) exited .*: restarting it in ([\d.]+)s", log)
    ]


def test_workers_that_keep_dying_at_start_are_restarted_ever_later_and_never_give_up() -> None:
    """A bad setting or a lost database must not stop the node: each slot waits 1, 2, 4 s… (logged) and a stop
    still ends it with 0. WEB_MAX_RESTARTS, which used to make it give up after 3 exits, is no longer read."""
    log = supervisor_log_from_here()
    process = start_web(free_port(), WEB_SERVER_MODULE="streams.no_such_module", WEB_MAX_RESTARTS="3")
    try:
        wait_until(lambda: process.poll() is not None or all(len(waits(log(), s)) >= 3 for s in (0, 1)), timeout=90)
        assert process.poll() is None, f"the supervisor stopped: {log()[-2000:]}"
        for slot in (0, 1):
            assert waits(log(), slot)[:3] == [1.0, 2.0, 4.0]
        process.send_signal(signal.SIGTERM)  # while its slots wait to restart: nothing is started any more
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()


def replaced(supervisor: int, victim: int) -> bool:
    return len(workers_of(supervisor)) == 2 and victim not in workers_of(supervisor)


def test_a_worker_killed_again_and_again_backs_off_while_the_other_keeps_serving() -> None:
    log = supervisor_log_from_here()
    process, port = web_started(WEB_MAX_RESTARTS="2")  # the old supervisor gave up on the third exit
    try:
        survivor = min(workers_of(process.pid))
        slot = next(int(s) for s in re.findall(rf"worker (\d+) started \(pid {survivor}\)", log()))
        for _ in range(4):
            victim = next(pid for pid in workers_of(process.pid) if pid != survivor)
            os.kill(victim, signal.SIGKILL)
            assert healthy(port)  # the survivor answers, on the same socket, while the slot waits
            wait_until(partial(replaced, process.pid, victim), timeout=60)
        assert process.poll() is None
        assert survivor in workers_of(process.pid), "the other worker was never stopped"
        assert waits(log(), 1 - slot) == [1.0, 2.0, 4.0, 8.0]
    finally:
        stop_web(process)


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
    workers = workers_of(process.pid)
    assert len(workers) == 2
    for pid in workers:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            variables = environ.read().split(b"\0")
        assert b"MALLOC_ARENA_MAX=" + arenas in variables
        assert b"PYTHONMALLOC=" + allocator in variables


@pytest.mark.parametrize(("cores", "workers"), [(None, 1), (1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_the_default_is_one_worker_per_two_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int | None, workers: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert web.default_processes() == workers
