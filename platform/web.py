"""Serve the ASGI app with several daphne worker processes sharing one listening socket.

Run by path, with the project's interpreter (it is what the Procfile's ``web:`` line runs)::

    .venv/bin/python platform/web.py

Settings (environment):

``WEB_HOST``, ``WEB_PORT``
    where to listen (default ``127.0.0.1``, ``8000``): the edge's plain HTTP port, or the workers' own with
    ``WEB_EDGE=off`` (IPv4 only then, as daphne adopts the socket as ``AF_INET``).
``WEB_EDGE``
    ``haproxy`` (default): the edge, HAProxy with platform/edge/haproxy.cfg (platform/edge_process.py), listens on
    the ports, terminates TLS and HTTP/2, applies the connection-level policy and hands each request over
    HTTP/1.1 to the workers, which accept on Unix sockets of their own and believe the forwarded headers of a
    request that carries the edge's token (made anew at each start, known to the edge and the workers only);
    it is started, restarted and stopped with them. ``off``: the workers listen on ``WEB_PORT`` themselves, plain
    HTTP/1.1 only, for a proxy of the operator's own in front (docs/operations.md, "Behind a proxy of your own").
``WEB_TLS_PORT``
    where the edge serves HTTPS too, with HTTP/2 offered through ALPN (default ``8443``; ``off`` for none; always
    off without the edge).
``WEB_TLS_CERT``, ``WEB_TLS_KEY``
    the PEM certificate (it may be followed by its chain) and its unencrypted PEM private key for HTTPS. Both or
    neither: unset, a self-signed development certificate is made under ``var/tls/`` (platform/tlscert.py).
    A file that cannot be read or does not hold what it should stops this process at start, naming it.
``WEB_BACKLOG``
    the listen backlog (default 4096; the kernel caps it at ``net.core.somaxconn``). A large one lets a
    reconnect storm queue instead of having its SYNs dropped and retried a second later.
``WEB_PROCESSES``
    how many workers (default: one per two cores, at least one; docs/operations.md, "How many workers").
``WEB_SERVER_MODULE``
    the module each worker runs as ``python -m <module>``: default ``streams.server``, the project's daphne
    with write flow control; ``daphne`` for stock daphne. It must accept daphne's command line (``--fd``).
``WEB_DAPHNE_ARGS``
    extra daphne arguments, split like a shell would (for instance ``-v 0``).
``WEB_RESTART_MAX_DELAY_S``
    the longest wait before a crash-looping worker is started again (default 60), see below.
``MALLOC_ARENA_MAX``
    glibc's malloc arenas per worker (default here 2, where glibc's own is 8 per core). Each thread that allocates
    (the Kafka fetcher, the delivery-log writer, the threads of ``sync_to_async``) may otherwise get an arena of
    its own, each keeping what it freed; with two, a worker's memory returns closer to its size before a load
    (docs/operations.md, "Memory").
``PYTHONMALLOC``
    ``malloc`` for the workers unless set: every Python object from glibc, whose free pages an idle worker hands
    back (``malloc_trim``); with Python's own small-object allocator a worker kept a quarter more than its size
    before a load, and the fan-out measured no slower without it (docs/benchmarks.md, "Soak").
``SSE_MAX_STREAMS``
    the streams a worker may hold open (default 20000, as the workers read it): this process raises its soft
    descriptor limit (``RLIMIT_NOFILE``), which the workers inherit, to that many plus
    ``DESCRIPTOR_HEADROOM``, up to the hard limit (to the hard limit for ``0``, no stream limit). Where the hard
    limit is lower, it says so at start, naming both: a worker then stops accepting near the hard limit.
``PROMETHEUS_MULTIPROC_DIR``
    where the workers keep their metrics for ``/metrics`` to merge (default: a new directory under
    ``var/metrics/``, removed at exit). Its files are cleared at start; a dead worker's live gauges are removed.

This process opens the workers' sockets and hands them to every worker, so a connection goes to whichever worker is
free first. Without the edge it is ONE TCP socket on ``WEB_PORT`` (``SO_REUSEADDR``, listening, non-blocking),
handed over with ``pass_fds`` as ``python -m streams.server --fd <fd> config.asgi:application``. Behind the edge
they are ``edge_process.SOCKETS`` Unix sockets in this process's own directory, ``var/run/web-<pid>`` (mode 0700,
removed at exit, or at the next start if this process was killed; `listen_unix` says why several), handed over as
systemd's socket activation does: descriptors 3 and on, ``LISTEN_FDS``, ``LISTEN_FDNAMES`` and ``LISTEN_PID``, each
read by Twisted's documented ``systemd:`` endpoint (``-e systemd:domain=UNIX:index=<i>``, with ``--proxy-headers``).
Each worker is a separate process with its own event loop and its own in-memory cache; none shares state
with another. The edge, when there is one, is supervised as one more slot.

Signals: SIGTERM, SIGINT and SIGHUP are forwarded to every worker and the edge (SIGHUP as SIGTERM); they run in
sessions of their own, so a terminal's Ctrl-C reaches them only through this forwarding, once. Workers still running
``STOP_GRACE_S`` seconds later are killed. This process exits with 0 when all its workers have exited after a
stop. Each worker also gets SIGKILL from the kernel if this process dies abruptly
(``PR_SET_PDEATHSIG``), so no worker is left holding the port.

A worker that exits while no stop was requested is restarted after a wait that doubles with each exit of its
slot, from ``RESTART_DELAY_MIN_S`` (1 s) up to ``WEB_RESTART_MAX_DELAY_S``, and is back to 1 s once a worker of
the slot has lived ``STABLE_AFTER_S`` (60 s). Each wait is logged. A crash loop (a bad setting, an import error, a
lost database) thus costs a start a minute, never the node: the other workers keep serving, and a worker whose
cause went away (the database back) serves again within the wait, with nobody to restart the node.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import functools
import os
import resource
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import edge_process  # platform/edge_process.py, beside this file
import tlscert  # platform/tlscert.py, beside this file
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import multiprocess as prometheus_multiprocess

from config.env import envchoice, envint, envstr

ROOT = Path(__file__).resolve().parent.parent
APPLICATION = "config.asgi:application"
DEFAULT_SERVER_MODULE = "streams.server"
RESTART_DELAY_MIN_S = 1.0
STABLE_AFTER_S = 60.0  # a worker that lived this long was not crash-looping: its slot's next wait is the shortest
STOP_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1
# Descriptors a worker holds beyond its streams: listening sockets, Kafka, Postgres and Redis connections, log and
# delivery-log files, and connections that have not become streams yet (an API call, a refused request).
DESCRIPTOR_HEADROOM = 1024
UNLIMITED_DESCRIPTORS = 1 << 20  # the kernel's usual ceiling (fs.nr_open)
UNIX_PATH_MAX = 107  # the longest name a Unix socket may have (sun_path, less its terminating NUL)
LISTEN_FDS_START = 3  # where socket activation puts the first descriptor it hands over (sd_listen_fds)
MALLOC_ARENA_MAX = "2"
PYTHONMALLOC = "malloc"


def log(message: str) -> None:
    # A log whose reader is gone (honcho killed, the terminal closed) must not stop this process halfway
    # through stopping its workers.
    with contextlib.suppress(OSError):
        print(f"web: {message}", file=sys.stderr, flush=True)


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """The shared listening socket, inheritable so the workers get it through ``pass_fds``."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        sys.exit(f"web: WEB_HOST {host!r} has no IPv4 address ({exc}); daphne adopts the socket as IPv4")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(infos[0][4])
    except OSError as exc:
        sock.close()
        sys.exit(f"web: cannot listen on {host}:{port}: {exc.strerror}")
    sock.listen(backlog)
    sock.setblocking(False)
    sock.set_inheritable(True)
    return sock


def socket_directory(private: Path) -> Path:
    """Where the workers' Unix sockets go: this supervisor's `private` directory, or, when its path is too long for
    a socket's name (107 bytes), a new one in the system's temporary directory, removed at exit."""
    longest = private / edge_process.socket_name(edge_process.SOCKETS - 1)
    if len(os.fsencode(longest)) <= UNIX_PATH_MAX:
        return private
    short = Path(tempfile.mkdtemp(prefix=f"sse-web-{os.getpid()}-"))
    atexit.register(shutil.rmtree, short, ignore_errors=True)
    return short


def listen_unix(directory: Path, backlog: int) -> list[socket.socket]:
    """The workers' sockets behind the edge: `edge_process.SOCKETS` Unix sockets in `directory` (the process's own,
    mode 0700), listening, non-blocking and inheritable; the edge spreads its connections over them.

    A Unix socket's connections cost the worker about a third less CPU per write than loopback TCP's, as no TCP runs
    for them (docs/benchmarks.md, "The edge's sockets to the workers"). But a connect to a Unix socket whose queue is
    full fails at once (TCP would try again a second later), and HAProxy's three retries found it still full: one
    socket's queue (`backlog`, at most net.core.somaxconn) lost streams in reconnect storms. With several, a connect
    that finds one full is retried on the next (haproxy.cfg, `option redispatch 1`), and the queues add up.
    """
    sockets: list[socket.socket] = []
    for index in range(edge_process.SOCKETS):
        path = directory / edge_process.socket_name(index)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
        except OSError as exc:  # a path over the 107 bytes a Unix socket's name may have (a long TMPDIR)
            sock.close()
            sys.exit(f"web: cannot listen on {path}: {exc.strerror or exc}; set TMPDIR to a shorter directory")
        sock.listen(backlog)
        sock.setblocking(False)
        sock.set_inheritable(True)
        sockets.append(sock)
    return sockets


def tls_port() -> int | None:
    """``WEB_TLS_PORT``: the HTTPS port, or None for ``off``."""
    if envstr("WEB_TLS_PORT", "8443").strip().lower() == "off":
        return None
    return envint("WEB_TLS_PORT", 8443, minimum=0, maximum=65535)


def certificate(host: str) -> tuple[Path, Path]:
    """The user's certificate and key, checked, or the development pair under var/tls/."""
    cert, key = envstr("WEB_TLS_CERT", "").strip(), envstr("WEB_TLS_KEY", "").strip()
    if bool(cert) != bool(key):
        sys.exit("web: set both WEB_TLS_CERT and WEB_TLS_KEY, or neither (for a development certificate)")
    try:
        if cert:
            tlscert.check_pair(Path(cert), Path(key))
            return Path(cert).resolve(), Path(key).resolve()
        return tlscert.development_pair(ROOT / "var" / "tls", host)
    except tlscert.CertificateError as exc:
        sys.exit(f"web: {exc}")


def metrics_dir() -> Path:
    """The directory the workers share their metrics through (streams/edge/metrics.py), cleared of an earlier run's."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.db"):
            old.unlink()
    else:
        parent = ROOT / "var" / "metrics"
        parent.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"web-{os.getpid()}-", dir=parent))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # the workers inherit it
    return directory


def forget_metrics(pid: int) -> None:
    """A dead worker's live gauges (streams open, cache bytes) no longer count; its counters stay in the sums."""
    prometheus_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


SUPERVISOR_PID = os.getpid()  # web.py forks its workers from its main thread; this is that process


def raise_descriptor_limit(max_streams: int) -> None:
    """Raise the soft RLIMIT_NOFILE to what `max_streams` streams need (0: no limit, so to the hard limit), within
    the hard limit; say at start when the hard limit is lower. Without this a worker stopped near 1024 sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    # No stream limit: as many as may be had (the kernel refuses an infinite soft limit on descriptors).
    no_limit = UNLIMITED_DESCRIPTORS if unlimited else hard
    need = max_streams + DESCRIPTOR_HEADROOM if max_streams else no_limit
    ceiling = need if unlimited else min(need, hard)
    if ceiling > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError) as exc:
            log(f"descriptor limit: cannot raise it from {soft} to {ceiling}: {exc}")
            ceiling = soft
    soft = max(soft, ceiling)
    if soft < need:
        log(
            f"descriptor limit: {soft} (hard limit {hard}) is below the {need} that SSE_MAX_STREAMS={max_streams} "
            "needs; a worker stops accepting near it (raise the hard limit: ulimit -n, systemd's LimitNOFILE, "
            "docker's --ulimit nofile)"
        )
    else:
        log(f"descriptor limit: {soft} per worker")


def _worker_setup(listening: list[int]) -> None:
    """A worker behind the edge, between fork and exec: as any child, and its sockets where socket activation puts
    the descriptors it hands over (3, 4, ...: `LISTEN_FDS`). Each is first copied above those numbers, so that
    putting one in place never overwrites another still to be moved; the copies are closed at exec."""
    _child_setup()
    above = LISTEN_FDS_START + len(listening)
    copies = [fcntl.fcntl(descriptor, fcntl.F_DUPFD, above) for descriptor in listening]
    for offset, copy in enumerate(copies):
        os.dup2(copy, LISTEN_FDS_START + offset)


def _child_setup() -> None:
    # Runs in the worker between fork and exec: die with the parent. The parent is single-threaded. SIGKILL, not
    # SIGTERM: this process dies abruptly only when it is killed (honcho kills it 5 s after a stop, sooner than
    # STOP_GRACE_S), and then nobody is left to kill a worker that is slow to stop on SIGTERM.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # A parent killed between the fork and the prctl above sends no death signal: the worker was already
    # adopted (its parent is no longer the supervisor), so it goes now rather than outlive it holding the port.
    if os.getppid() != SUPERVISOR_PID:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Slot:
    """One worker's place: when its worker started, how long its next restart waits, and when that is due."""

    started_at: float = 0.0
    delay_s: float = 0.0  # the last wait; 0 until a worker of this slot exits unexpectedly
    restart_at: float | None = None  # monotonic time of the pending restart, if any

    def backoff(self, now: float, max_delay_s: float) -> float:
        """The wait before the next start: the shortest after a worker that lived, else twice the last, capped."""
        if self.delay_s == 0.0 or now - self.started_at >= STABLE_AFTER_S:
            self.delay_s = RESTART_DELAY_MIN_S
        else:
            self.delay_s = min(2 * self.delay_s, max_delay_s)
        self.restart_at = now + self.delay_s
        return self.delay_s


class Supervisor:
    def __init__(
        self,
        sockets: list[socket.socket],
        processes: int,
        argv_tail: list[str],
        max_delay_s: float = 60.0,
        edge: edge_process.Edge | None = None,
    ) -> None:
        self.sockets = sockets  # the workers' own port, or their Unix sockets behind the edge
        self.edge = edge
        self.processes = processes
        self.argv_tail = argv_tail
        self.max_delay_s = max(max_delay_s, RESTART_DELAY_MIN_S)
        self.workers: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}  # pid -> (slot, process), the edge too
        # One slot per worker, and the edge's last: it is restarted as a worker is.
        self.slots = [Slot() for _ in range(processes + (edge is not None))]
        self.stopping = False
        self.stop_deadline = 0.0
        self.pending_signal: int | None = None

    def name(self, slot: int) -> str:
        return "edge" if self.edge is not None and slot == self.processes else f"worker {slot}"

    def spawn(self, slot: int) -> None:
        fds: list[int] = []
        setup: Callable[[], None] = _child_setup
        if self.edge is not None and slot == self.processes:
            argv, env = self.edge.argv(), self.edge.env
        else:
            module = envstr("WEB_SERVER_MODULE", DEFAULT_SERVER_MODULE).strip() or DEFAULT_SERVER_MODULE
            # Read by glibc and Python at start: set here, never changed later. An operator's own values win.
            env = {"MALLOC_ARENA_MAX": MALLOC_ARENA_MAX, "PYTHONMALLOC": PYTHONMALLOC, **os.environ}
            if self.edge is None:
                fds = [self.sockets[0].fileno()]
                argv = [sys.executable, "-m", module, "--fd", str(fds[0]), *self.argv_tail, APPLICATION]
            else:
                # The Unix sockets go over as socket activation hands them over (Twisted's `systemd:` endpoint):
                # descriptors 3 and on, `LISTEN_FDS`, `LISTEN_FDNAMES`, and `LISTEN_PID` naming the process meant,
                # known only once it runs: hence the shell that sets it and then becomes the worker.
                count = len(self.sockets)
                fds = list(range(LISTEN_FDS_START, LISTEN_FDS_START + count))
                setup = functools.partial(_worker_setup, [sock.fileno() for sock in self.sockets])
                names = ":".join(edge_process.socket_name(index) for index in range(count))
                env |= {"LISTEN_FDS": str(count), "LISTEN_FDNAMES": names, "SSE_EDGE_TOKEN": self.edge.token}
                argv = ["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", sys.executable, "-m", module]
                for index in range(count):
                    argv += ["-e", f"systemd:domain=UNIX:index={index}"]
                argv.append("--proxy-headers")  # believed from the edge alone (its token, streams/server/forwarded.py)
                argv += [*self.argv_tail, APPLICATION]
        # preexec_fn is safe here: this process has a single thread.
        child = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            pass_fds=fds,
            start_new_session=True,
            preexec_fn=setup,  # noqa: PLW1509
        )
        self.workers[child.pid] = (slot, child)
        self.slots[slot].started_at = time.monotonic()
        log(f"{self.name(slot)} started (pid {child.pid})")

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGCHLD:
            self.pending_signal = signum

    def stop(self, signum: int) -> None:
        forward = signal.SIGTERM if signum == signal.SIGHUP else signum
        if not self.stopping:
            log(f"{signal.Signals(signum).name}: stopping {len(self.workers)} worker(s)")
            self.stopping = True
            self.stop_deadline = time.monotonic() + STOP_GRACE_S
            for slot in self.slots:
                slot.restart_at = None
        for pid in list(self.workers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, forward)

    def reap(self) -> None:
        for pid, (slot, worker) in list(self.workers.items()):
            code = worker.poll()
            if code is None:
                continue
            del self.workers[pid]
            forget_metrics(pid)
            if self.stopping:
                continue
            now = time.monotonic()
            lived = now - self.slots[slot].started_at
            delay = self.slots[slot].backoff(now, self.max_delay_s)
            log(
                f"{self.name(slot)} (pid {pid}) exited unexpectedly with status {code} after {lived:.1f}s: "
                f"restarting it in {delay:g}s"
            )

    def restart_due(self) -> None:
        now = time.monotonic()
        for number, slot in enumerate(self.slots):
            if slot.restart_at is not None and slot.restart_at <= now and not self.stopping:
                slot.restart_at = None
                self.spawn(number)

    def wait_s(self) -> float:
        """How long the loop may sleep: a second at most (a lost wakeup costs no more), less if a restart is due."""
        due = [slot.restart_at for slot in self.slots if slot.restart_at is not None]
        return 1.0 if not due else min(1.0, max(0.0, min(due) - time.monotonic()))

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self.on_signal)
        for slot in range(len(self.slots)):
            self.spawn(slot)
        while self.workers or not self.stopping:  # a slot waiting to restart has no worker meanwhile
            select.select([wake_r], [], [], self.wait_s())
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            if self.pending_signal is not None:
                signum, self.pending_signal = self.pending_signal, None
                self.stop(signum)
            self.reap()
            self.restart_due()
            if self.stopping and self.workers and time.monotonic() > self.stop_deadline:
                log(f"{len(self.workers)} worker(s) still running {STOP_GRACE_S:.0f}s after the stop: killing them")
                for pid in list(self.workers):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.stop_deadline = float("inf")
        return 0


def default_processes() -> int:
    """One worker per two cores: a worker's event loop takes a core at saturation, and its fetch process, its Kafka
    threads and the rest of the node (Celery, the embedded services) need the other (docs/operations.md)."""
    return max(1, (os.cpu_count() or 1) // 2)


def main() -> int:
    try:
        host = envstr("WEB_HOST", "127.0.0.1").strip() or "127.0.0.1"
        port = envint("WEB_PORT", 8000, minimum=0, maximum=65535)
        backlog = envint("WEB_BACKLOG", 4096, minimum=1)
        os.environ["WEB_BACKLOG"] = str(backlog)  # the workers inherit it: they listen again on their sockets with it
        processes = envint("WEB_PROCESSES", default_processes(), minimum=1)
        max_streams = envint("SSE_MAX_STREAMS", 20_000, minimum=0)
        max_delay_s = envint("WEB_RESTART_MAX_DELAY_S", 60, minimum=1)
        with_edge = envchoice("WEB_EDGE", ("haproxy", "off"), "haproxy") == "haproxy"
        https_port = tls_port()
    except ImproperlyConfigured as exc:
        sys.exit(f"web: {exc}")
    try:
        extra = shlex.split(envstr("WEB_DAPHNE_ARGS", ""))
    except ValueError as exc:
        sys.exit(f"web: WEB_DAPHNE_ARGS cannot be split: {exc}")
    if https_port is not None and https_port == port != 0:
        sys.exit(f"web: WEB_TLS_PORT and WEB_PORT are both {port}; HTTPS needs a port of its own (or WEB_TLS_PORT=off)")
    if https_port is not None and not with_edge:
        sys.exit("web: HTTPS is the edge's: with WEB_EDGE=off, set WEB_TLS_PORT=off (a proxy of your own serves it)")
    edge = None
    if with_edge:
        for public in (port, https_port):
            if public is not None:
                listen(host, public, backlog).close()  # in use or not ours to take: said now, not by a looping edge
        sockets, edge = start_edge(host, port, https_port, backlog)
        where = f"the edge (HAProxy) on {host}:{port}"
    else:
        sockets = [listen(host, port, backlog)]
        where = f"{host}:{sockets[0].getsockname()[1]}"
    metrics_dir()
    raise_descriptor_limit(max_streams)
    log(f"listening on {where} (backlog {backlog}), {processes} worker(s)")
    if edge is not None and edge.tls_pem is not None:
        log(f"https on {host}:{https_port} (HTTP/2 and HTTP/1.1, through the edge)")
    if "WEB_MAX_RESTARTS" in os.environ:
        log("WEB_MAX_RESTARTS is no longer read: a crash-looping worker is restarted ever later, never given up")
    return Supervisor(sockets, processes, extra, max_delay_s, edge).run()


def start_edge(
    host: str, port: int, https_port: int | None, backlog: int
) -> tuple[list[socket.socket], edge_process.Edge]:
    """The workers' Unix sockets, and the edge that forwards to them, its configuration checked."""
    try:
        binary = edge_process.find_haproxy()
        # This supervisor's own directory, for the TLS key and the workers' sockets (one left by a supervisor that
        # was killed is removed at the next start).
        private = edge_process.private_directory(ROOT / "var" / "run")
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        pem = None
        if https_port is not None:
            cert, key = certificate(host)
            pem = edge_process.tls_pem(private, cert, key)
        run_dir = socket_directory(private)
        sockets = listen_unix(run_dir, backlog)
        upstream = str(run_dir)
        token = edge_process.new_token()
        env = edge_process.environment(
            host=host, port=port, tls_port=https_port, pem=pem, upstream=upstream, token=token
        )
        edge = edge_process.Edge(binary, upstream, pem, token, env)
        edge.check()
    except ImproperlyConfigured as exc:
        sys.exit(f"web: {exc}")
    except (edge_process.EdgeError, OSError) as exc:
        sys.exit(f"web: {exc}")
    return sockets, edge


if __name__ == "__main__":
    sys.exit(main())
