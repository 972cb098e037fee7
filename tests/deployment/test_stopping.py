"""`make run` stops every process it started, the services' included, on SIGINT, SIGTERM and SIGHUP.

Each case starts `make run` in a session of its own, with its web ports free and its services embedded under a
directory of the module's (``SSE_VAR_DIR``, so the services the test run itself uses, given through
``DATABASE_URL``/``REDIS_URL``/``KAFKA_BOOTSTRAP_SERVERS``, are neither reused nor stopped: those variables are
unset in the child). Once the web port answers it notes every process of the run: the session's, their
descendants (honcho and the web supervisor start theirs in sessions of their own) and whatever names the
directory on its command line (the services daemonize). It sends the signal as a user would: Ctrl-C and a
closed terminal reach the whole process group, a process manager's SIGTERM the top process only. Within
`STOP_BOUND_S` none of them may be left, nor any new one of the run. The cases share the directory, so only the
first pays for initdb, the migrations and formatting the broker's storage.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from embedded import HOST

from tests.conftest import ROOT
from tests.support.servers import free_port

# docs/operations.md, "Stopping": with-services.sh gives the platform 15 s before it kills what is left of it,
# then the services stop (a few seconds; a service that ignores SIGTERM is killed after its own grace).
STOP_BOUND_S = 30.0
START_TIMEOUT_S = 150.0  # the first start: initdb, the migrations, the broker's JVM and its storage

pytestmark = [pytest.mark.timeout(START_TIMEOUT_S + STOP_BOUND_S + 60), pytest.mark.beside]

SERVICE_PROGRAMS = ("postgres", "redis-server", "java")
Ident = tuple[int, int]  # (pid, start time in clock ticks): a pid the kernel reuses is another process


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    start: int
    cmdline: str

    @property
    def ident(self) -> Ident:
        return (self.pid, self.start)


def processes() -> dict[int, Proc]:
    """Every live (not zombie) process, from /proc."""
    found: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        pid = int(entry.name)
        found[pid] = Proc(pid, ppid=int(fields[1]), sid=int(fields[3]), start=int(fields[19]), cmdline=cmdline)
    return found


def of_run(top: int, var_dir: Path) -> dict[Ident, Proc]:
    """The processes of the run whose top process is `top` (its session's leader): see the module's docstring."""
    table = processes()
    marker = str(var_dir)
    mine = {pid for pid, proc in table.items() if proc.sid == top or marker in proc.cmdline}
    mine.add(top)
    for pidfile in [*var_dir.glob("*/*.pid"), var_dir / "postgres" / "data" / "postmaster.pid"]:
        with contextlib.suppress(OSError, ValueError, IndexError, KeyError):
            pid = int(pidfile.read_text().split()[0])  # Redis names no file on its command line
            if any(name in table[pid].cmdline for name in SERVICE_PROGRAMS):  # not a stale pidfile's reused pid
                mine.add(pid)
    grew = True
    while grew:
        more = {pid for pid, proc in table.items() if proc.ppid in mine} - mine
        mine |= more
        grew = bool(more)
    return {table[pid].ident: table[pid] for pid in mine if pid in table}


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://{HOST}:{port}/healthz", timeout=1).status_code < 500
    except httpx.HTTPError:
        return False


# `make run` as a terminal starts it: its signals at their defaults, whatever this suite inherited (a suite run
# under `nohup` ignores SIGHUP, and a shell cannot trap a signal that was ignored when it started).
AS_IN_A_TERMINAL = (
    "import os, signal\n"
    "for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM): signal.signal(signum, signal.SIG_DFL)\n"
    "os.execvp('make', ['make', '--no-print-directory', 'run'])"
)


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    var_dir: Path
    port: int
    log: Path

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def processes(self) -> dict[Ident, Proc]:
        return of_run(self.process.pid, self.var_dir)


@pytest.fixture(scope="module")
def var_dir() -> Iterator[Path]:
    """The services' state, shared by the cases: under the checkout's var/, where the postgres user may go."""
    directory = ROOT / "var" / f"stopping-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True)
    yield directory
    left = [proc for proc in processes().values() if str(directory) in proc.cmdline]
    for proc in left:  # a failed case's; the assertion has said so already
        os.kill(proc.pid, signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)


def start(var_dir: Path, name: str) -> Run:
    """`make run` in a session of its own, once its web port answers."""
    port, tls_port = free_port(), free_port()
    while tls_port == port:
        tls_port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "DJANGO_SETTINGS_MODULE"}
    }
    env |= {
        "SSE_VAR_DIR": str(var_dir),
        "WEB_PORT": str(port),
        "WEB_TLS_PORT": str(tls_port),
    }
    log = var_dir / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", AS_IN_A_TERMINAL],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run = Run(process, var_dir, port, log)
    started = time.monotonic()
    deadline = started + START_TIMEOUT_S
    while not answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_everything(run)
            pytest.fail(f"make run: no answer on port {port} (exit status {process.poll()}):\n{run.tail()}")
        time.sleep(0.2)
    print(f"{name}: answering {time.monotonic() - started:.0f}s after make run")
    return run


def stop_everything(run: Run, left: Sequence[Proc] = ()) -> None:
    """What a failed case leaves behind, killed, so the next case starts clean: the run's processes now and
    those `left` that still run (an orphan is no longer in the run's tree)."""
    # The services first, in order: a Postgres killed outright may keep the next case's from starting.
    subprocess.run(
        [sys.executable, str(ROOT / "platform" / "services.py"), "down"],
        cwd=ROOT,
        env={**os.environ, "SSE_VAR_DIR": str(run.var_dir)},
        capture_output=True,
        timeout=90,
        check=False,
    )
    now = processes()
    targets = {
        *run.processes().values(),
        *(proc for proc in left if proc.pid in now and now[proc.pid].ident == proc.ident),
    }
    for proc in targets:
        if proc.pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
    run.process.wait(timeout=10)


def assert_all_stop(run: Run, before: dict[Ident, Proc], signalled: float) -> float:
    """Wait until no process of the run is left; return how long that took since the signal."""
    deadline = signalled + STOP_BOUND_S
    seen = dict(before)
    while True:
        now = processes()
        seen |= run.processes()
        left = [proc for ident, proc in seen.items() if ident[0] in now and now[ident[0]].ident == ident]
        if not left:
            elapsed = time.monotonic() - signalled
            run.process.wait(timeout=5)
            return elapsed
        if time.monotonic() > deadline:
            listing = "\n".join(f"  {proc.pid} (ppid {proc.ppid}) {proc.cmdline[:150]}" for proc in left)
            stop_everything(run, left)
            pytest.fail(f"{len(left)} process(es) still running {STOP_BOUND_S:.0f}s after the signal:\n{listing}")
        time.sleep(0.1)


CASES = {
    "ctrl-c": (signal.SIGINT, "group"),
    "sigterm": (signal.SIGTERM, "top"),
    "terminal-closed": (signal.SIGHUP, "group"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_it_stops_every_process_it_started(var_dir: Path, case: str) -> None:
    signum, target = CASES[case]
    run = start(var_dir, case)
    before = run.processes()
    assert any("redis-server" in proc.cmdline for proc in before.values()), "the run's own services"
    assert len(before) >= 12, before  # make, the services, honcho's processes, both web workers
    signalled = time.monotonic()
    if target == "group":
        os.killpg(run.process.pid, signum)
    else:
        run.process.send_signal(signum)
    elapsed = assert_all_stop(run, before, signalled)
    assert not answers(run.port)
    print(f"{case}: {len(before)} processes stopped in {elapsed:.1f}s")


def test_it_stops_everything_when_a_service_is_already_gone(var_dir: Path) -> None:
    run = start(var_dir, "redis-killed")
    before = run.processes()
    redis = [proc for proc in before.values() if proc.cmdline.startswith(shutil.which("redis-server") or "?")]
    assert len(redis) == 1, redis
    os.kill(redis[0].pid, signal.SIGKILL)
    signalled = time.monotonic()
    run.process.send_signal(signal.SIGTERM)
    elapsed = assert_all_stop(run, before, signalled)
    print(f"redis killed first: {len(before)} processes stopped in {elapsed:.1f}s")
