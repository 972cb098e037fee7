"""A web worker killed mid-stream (platform/web.py, two workers on one socket): its clients resume with
Last-Event-ID on whichever worker takes them, with nothing lost or repeated, while the other worker's streams go
on; the supervisor replaces the dead worker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable

import pytest

from bindings.services import do_put_route
from tests.conftest import unique, wait_until
from tests.support.rawsse import RawStream
from tests.support.servers import HOST, healthy, workers_of
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def serving_pid(port: int, stream: RawStream) -> int:
    """The worker holding the server side of `stream`'s connection."""
    local = stream.sock.getsockname()[1]
    found = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"( sport = :{port} and dport = :{local} )"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(re.search(r"pid=(\d+)", found).group(1))  # type: ignore[union-attr]


def read_until(stream: RawStream, count: int) -> None:
    """Read until `stream` holds at least `count` events."""

    def enough() -> bool:
        stream.pump(0.2)
        return len(stream.events()) >= count

    wait_until(enough, timeout=15)


def test_clients_of_a_killed_worker_resume_elsewhere_with_nothing_lost(
    web_without_edge: tuple[subprocess.Popen[bytes], int],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    supervisor, port = web_without_edge
    topic = new_topic(partitions=2)
    name = unique("kill")
    do_put_route(name=name, path=f"/{name}", topic=topic)
    streams = [RawStream(port, f"/{name}") for _ in range(8)]
    resumed: list[EventStream] = []
    try:
        for n in range(6):
            produce(topic, f"before-{n}".encode(), partition=n % 2)
        for stream in streams:
            read_until(stream, 6)
        pids = {stream: serving_pid(port, stream) for stream in streams}
        victim = pids[streams[0]]
        assert victim in workers_of(supervisor.pid)
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: len(workers_of(supervisor.pid)) == 2 and victim not in workers_of(supervisor.pid), timeout=30
        )
        wait_until(lambda: healthy(port), timeout=30)
        for n in range(6):
            produce(topic, f"after-{n}".encode(), partition=n % 2)
        expected = sorted(f"after-{n}" for n in range(6))
        for stream in streams:
            if pids[stream] == victim:  # cut: resume where it stood, on whichever worker takes it
                stream.pump(1)
                assert stream.closed
                last = stream.events()[-1].id or ""
                resumed.append(EventStream(f"http://{HOST}:{port}/{name}", headers={"Last-Event-ID": last}))
                assert sorted(event.text for event in resumed[-1].events(6)) == expected
            else:  # the other worker's streams never noticed
                read_until(stream, 12)
                assert sorted(e.text for e in stream.events()[6:]) == expected
                assert not stream.closed
        produce(topic, b"sentinel", partition=0)
        for again in resumed:
            assert again.next_event().text == "sentinel"  # nothing repeated before it
    finally:
        for stream in streams:
            stream.close()
        for again in resumed:
            again.close()
