"""What the embedded services share: where their state lives, the process and port helpers, and the
`Service` each of `embedded_postgres.py`, `embedded_redis.py` and `embedded_kafka.py` implements.

Loaded by `services.py` (and by the tests, through it); platform/ is no package, so these modules import each
other by their file names.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parent.parent
# Where the services keep their state: the checkout's var/ unless SSE_VAR_DIR names another directory (the
# tests of `make run`'s stopping start a platform of their own there). config/env.py reads the same variable.
VAR = Path(os.environ["SSE_VAR_DIR"]).resolve() if os.environ.get("SSE_VAR_DIR") else ROOT / "var"

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
POLL_INTERVAL = 0.1


class ServiceError(RuntimeError):
    """A service could not be started, checked or stopped."""


def log(message: str) -> None:
    """Print a progress or status message to stderr."""
    print(f"services: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Processes, ports, files
# --------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # vanished meanwhile, unless there is no procfs at all
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def pid_runs(pid: int, marker: str) -> bool:
    """Whether ``pid`` is alive and its command line mentions ``marker``."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no procfs: trust the pid
    return marker.encode() in cmdline


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has exited; return whether it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


def terminate(pid: int, name: str, grace: float) -> None:
    """SIGTERM ``pid``, then SIGKILL it if it is still alive after ``grace`` s."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_gone(pid, grace):
        return
    log(f"{name} (pid {pid}) ignored SIGTERM for {grace:.0f}s, killing it")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_gone(pid, 5.0):
        raise ServiceError(f"{name} (pid {pid}) does not die")


def read_int(path: Path) -> int | None:
    """The integer on the first line of ``path``, or None."""
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, indented, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"    (cannot read {path}: {exc.strerror})"
    tail = text.splitlines()[-lines:]
    if not tail:
        return f"    ({path} is empty)"
    return "\n".join(f"    {line}" for line in tail)


def port_free(port: int) -> bool:
    """Whether a server could listen on ``HOST:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int | None) -> int:
    """``preferred`` when it is free, else a free port chosen by the OS."""
    if preferred and port_free(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def tcp_answers(port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``HOST:port``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_ready(
    name: str,
    ready: Callable[[], bool],
    alive: Callable[[], bool],
    logfile: Path,
    timeout: float = START_TIMEOUT,
) -> None:
    """Poll ``ready`` until it is true; fail when ``alive`` turns false or on timeout."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not alive():
            raise ServiceError(f"{name} exited during startup; last lines of {logfile}:\n{log_tail(logfile)}")
        if time.monotonic() >= deadline:
            raise ServiceError(
                f"{name} did not become ready within {timeout:.0f}s; last lines of {logfile}:\n{log_tail(logfile)}"
            )
        time.sleep(POLL_INTERVAL)


def run(
    cmd: Sequence[str],
    what: str,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``cmd`` in a new session and return its stdout; raise on failure."""
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=False,
    )
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise ServiceError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{output}")
    return proc.stdout


# --------------------------------------------------------------------------
# Services
# --------------------------------------------------------------------------


class Service:
    """An embedded service kept under ``var/<name>/``."""

    name: ClassVar[str]
    env_key: ClassVar[str]

    @property
    def dir(self) -> Path:
        """The state directory of the service."""
        return VAR / self.name

    @property
    def portfile(self) -> Path:
        """Where the port chosen last time is remembered."""
        return self.dir / "port"

    def url(self, port: int) -> str:
        """The URL clients use to reach the service on ``port``."""
        raise NotImplementedError

    def running_port(self) -> int | None:
        """The port when the service runs from this checkout and answers, else None."""
        raise NotImplementedError

    def start(self) -> int:
        """Start the service (not running now) and return its port once it answers."""
        raise NotImplementedError

    def stop(self) -> bool:
        """Stop the service; return whether something was running."""
        raise NotImplementedError


class PidfileService(Service):
    """A service whose process is tracked by a pidfile of ours."""

    marker: ClassVar[str]  # must appear in the process's command line
    stop_grace: ClassVar[float] = STOP_TIMEOUT

    @property
    def pidfile(self) -> Path:
        """The pidfile of the service process."""
        raise NotImplementedError

    def live_pid(self) -> int | None:
        """The pid from the pidfile if that process is ours; drop a stale pidfile."""
        pid = read_int(self.pidfile)
        if pid is None:
            return None
        if pid_runs(pid, self.marker):
            return pid
        log(f"{self.name}: removing stale pidfile {self.pidfile} (pid {pid} is not running it)")
        self.pidfile.unlink(missing_ok=True)
        return None

    def answers(self, port: int) -> bool:
        """Whether the service answers on ``port``."""
        raise NotImplementedError

    def running_port(self) -> int | None:
        """The port when the service runs from this checkout and answers, else None."""
        port = read_int(self.portfile)
        if self.live_pid() is None or port is None:
            return None
        return port if self.answers(port) else None

    def stop(self) -> bool:
        """SIGTERM the pidfile's process (SIGKILL after a grace period)."""
        pid = self.live_pid()
        if pid is None:
            return False
        terminate(pid, self.name, self.stop_grace)
        self.pidfile.unlink(missing_ok=True)
        return True
