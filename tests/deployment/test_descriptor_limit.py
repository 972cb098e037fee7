"""platform/web.py raises its workers' descriptor limit to what SSE_MAX_STREAMS needs, or says at start why not.

Before, a worker kept the soft limit it was started with (1024 on most systems) and stopped accepting near 1024
sockets while SSE_MAX_STREAMS allows 20 000 streams.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import unique, wait_until
from tests.support.servers import ROOT, VAR, free_port, healthy, stop_web, web_environment, workers_of

pytestmark = pytest.mark.django_db(transaction=True)
HEADROOM = 1024  # platform/web.py's DESCRIPTOR_HEADROOM


def open_files_limit(pid: int) -> tuple[int, int]:
    """The soft and hard RLIMIT_NOFILE of process `pid`, as the kernel reports them."""
    line = next(row for row in Path(f"/proc/{pid}/limits").read_text().splitlines() if row.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def limited_to(soft: int, hard: int) -> Callable[[], None]:
    def limit() -> None:  # runs in the supervisor before exec, as a shell's `ulimit -n` would
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


@contextmanager
def web_started_with(soft: int, hard: int, **env: str) -> Iterator[tuple[int, Path]]:
    """platform/web.py with one worker, started under the given descriptor limits: its worker's pid and its log."""
    port = free_port()
    log_path = VAR / f"{unique('test-web-descriptors')}.log"
    VAR.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "platform/web.py"], cwd=ROOT, env=web_environment(port, 1, **env),
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=limited_to(soft, hard),  # noqa: PLW1509
        )  # fmt: skip
    try:
        wait_until(lambda: len(workers_of(process.pid)) == 1 and healthy(port), timeout=60)
        (worker,) = workers_of(process.pid)
        yield worker, log_path
    finally:
        stop_web(process)


def test_a_worker_gets_the_descriptors_its_streams_need() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    streams = min(3000, hard - HEADROOM)  # within the hard limit, wherever the test runs
    with web_started_with(1024, hard, SSE_MAX_STREAMS=str(streams)) as (worker, log_path):
        assert open_files_limit(worker) == (streams + HEADROOM, hard)
        assert f"descriptor limit: {streams + HEADROOM} per worker" in log_path.read_text()


def test_a_hard_limit_below_the_need_is_used_whole_and_named_at_start() -> None:
    with web_started_with(512, 2048, SSE_MAX_STREAMS="20000") as (worker, log_path):
        assert open_files_limit(worker) == (2048, 2048)
        said = log_path.read_text()
        assert "descriptor limit: 2048 (hard limit 2048) is below the 21024 that SSE_MAX_STREAMS=20000 needs" in said
