"""What the benchmarks share: /proc readings, the processes they start, and one scenario's set-up and tear-down.

A scenario (`Scenario`) is one fresh topic (4 partitions) with a route to it, one fresh server under test (one
`python -m streams.server` process, or platform/web.py with several workers; with `--edges`, one process behind
an edge the harness starts: HAProxy with platform/edge/haproxy.cfg, or nginx with bench/edge/nginx.conf), a
producer (bench/producer.py) and
the load generator (bench/loadgen.py), plus a guard that kills the server if it opens too many connections to the
shared broker. Every process runs in its own session with `PR_SET_PDEATHSIG`, and `close()` (or
`Proc.stop_all()` on Ctrl-C) stops it; traffic stays on 127.0.0.1. Used by bench/fanout.py and bench/soak.py.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import datetime as dt
import json
import os
import queue
import resource
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

import django
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
PARTITIONS = 4
MESSAGE_BYTES = 1024
NOFILE = 65536
PR_SET_PDEATHSIG = 1


class BenchError(RuntimeError):
    """A scenario failed; the message goes into the table."""


class Interrupted(BaseException):
    """SIGTERM: unwind like Ctrl-C."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# /proc readings
# --------------------------------------------------------------------------


def cpu_ticks(pid: int | None) -> int | None:
    """utime + stime of a process (all its threads), in clock ticks."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


def task_cpu(pid: int, tid: int) -> float:
    """CPU seconds of one thread, from its schedstat (nanoseconds, not clock ticks); 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def process_cpu(pid: int) -> float:
    """CPU seconds of the threads of a process alive now (`task_cpu` each); 0 once it is gone."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0.0
    return sum(task_cpu(pid, tid) for tid in tids)


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def fd_count(pid: int) -> int | None:
    """Open file descriptors of a process."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    found, todo = [], [pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children(pid)
    return found


def socket_inodes(pids: list[int]) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            with contextlib.suppress(OSError):
                target = os.readlink(fd_dir / name)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def connections_to(pids: list[int], port: int) -> int:
    """Established TCP connections from these processes to `port` (the broker): from /proc, no psutil."""
    inodes = socket_inodes(pids)
    if not inodes:
        return 0
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines, None)
            for line in lines:
                parts = line.split()
                if parts[3] == "01" and int(parts[2].rsplit(":", 1)[1], 16) == port and parts[9] in inodes:
                    count += 1
    return count


def is_edge(pid: int) -> bool:
    """Whether `pid` runs HAProxy (platform/web.py's edge, among its workers)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "haproxy"
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limits in ((max(soft, NOFILE), max(hard, NOFILE)), (hard, hard)):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Proc:
    """A child process in its own session, logged to a file, stopped by `stop()` (and by the registry)."""

    running: ClassVar[list[Proc]] = []  # the live children, for cleanup

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        pipes: bool = False,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.log_file = open(log_path, "wb")  # noqa: SIM115  (closed in stop)
        # Started from the main thread only: PR_SET_PDEATHSIG fires when the thread that forked exits.
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else self.log_file,
            stderr=self.log_file,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
            pass_fds=pass_fds,
        )
        self.pid = self.popen.pid
        Proc.running.append(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 5.0, sig: int = signal.SIGTERM) -> int | None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.pid}) ignored {signal.Signals(sig).name} for {grace:.0f}s: killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(5)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.log_file.close()
        if self in Proc.running:
            Proc.running.remove(self)
        return self.popen.returncode

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").strip().splitlines()
            return "\n".join("    " + line for line in text[-lines:])
        return ""

    @classmethod
    def stop_all(cls) -> None:
        for proc in reversed(list(cls.running)):
            with contextlib.suppress(Exception):
                proc.stop(grace=3.0)


class LoadGen(Proc):
    """bench/loadgen.py, driven by JSON lines on its stdin; replies come back through a reader thread."""

    def __init__(self, port: int, log_path: Path, *, source_addresses: int = 0) -> None:
        argv = [PY, str(BENCH / "loadgen.py"), "--port", str(port), "--source-addresses", str(source_addresses)]
        super().__init__("loadgen", argv, log_path=log_path, pipes=True)
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        assert self.popen.stdout is not None
        threading.Thread(target=self._read, args=(self.popen.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                with contextlib.suppress(json.JSONDecodeError):
                    self.replies.put(json.loads(line))
        self.replies.put(None)

    def ask(self, command: dict[str, Any], limit_s: float) -> dict[str, Any]:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write((json.dumps(command) + "\n").encode())
            self.popen.stdin.flush()
        except OSError as exc:
            raise BenchError(f"load generator gone ({exc}):\n{self.tail()}") from exc
        try:
            reply = self.replies.get(timeout=limit_s)
        except queue.Empty:
            raise BenchError(f"load generator did not answer {command['cmd']!r} within {limit_s:.0f}s") from None
        if reply is None:
            raise BenchError(f"load generator exited during {command['cmd']!r}:\n{self.tail()}")
        if "error" in reply:
            raise BenchError(f"load generator: {reply['error']}")
        return reply

    def stop(self, grace: float = 5.0, sig: int = signal.SIGTERM) -> int | None:
        if self.alive() and self.popen.stdin is not None:
            with contextlib.suppress(OSError, BenchError, subprocess.TimeoutExpired):
                self.popen.stdin.write(b'{"cmd": "quit"}\n')
                self.popen.stdin.flush()
                self.popen.wait(3)
        return super().stop(grace, sig)


class Companions:
    """What `make run` runs beside the web workers (platform/Procfile): the Celery worker (`--pool=solo`, which keeps
    its Spark session warm between rollups), Celery beat with the database scheduler, and the demo producer,
    after `manage.py demo_setup` as platform/start.sh runs it. Started once for a run (`--node`) and kept through
    every scenario, the baseline's too; stopped at its end."""

    PROCFILE = ("worker", "beat", "producer")

    def __init__(self, opts: Options, env: dict[str, str]) -> None:
        self.opts = opts
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local"),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.procs: dict[str, Proc] = {}

    def log_path(self, what: str) -> Path:
        return self.opts.out_dir / f"node-{self.opts.run_id}-{what}.log"

    def commands(self) -> dict[str, list[str]]:
        """platform/Procfile's lines but `web:` (each scenario starts its own web.py), from the checkout run."""
        commands: dict[str, list[str]] = {}
        procfile = self.opts.app_dir / "platform" / "Procfile"
        bin_dir = Path(PY).parent
        for line in procfile.read_text().splitlines():
            name, sep, command = line.partition(":")
            if not sep or name.strip() not in self.PROCFILE:
                continue
            argv = command.split()
            if argv and argv[0].startswith(".venv/bin/"):  # this interpreter's virtualenv
                argv[0] = str(bin_dir / argv[0].removeprefix(".venv/bin/"))
            commands[name.strip()] = argv
        missing = set(self.PROCFILE) - set(commands)
        if missing:
            raise BenchError(f"{procfile} has no {', '.join(sorted(missing))} line")
        return commands

    def start(self, warm_s: float) -> None:
        """demo_setup, then the Procfile's processes; waits up to `warm_s` for the worker's first rollup (its Spark
        session then warm, as on a node that has run a while)."""
        setup = [PY, "manage.py", "demo_setup", "--topic", "items-snapshots", "--path", "/items"]
        setup += ["--avro-topic", "orders-avro", "--avro-path", "/orders"]
        done = subprocess.run(
            setup, cwd=self.opts.app_dir, env=self.env, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise BenchError(f"demo_setup failed:\n{done.stderr[-2000:]}")
        for name, argv in self.commands().items():
            self.procs[name] = Proc(name, argv, log_path=self.log_path(name), env=self.env, cwd=self.opts.app_dir)
            log(f"node: {name} started (pid {self.procs[name].pid}): {' '.join(argv[1:])}")
        worker = self.procs["worker"]
        deadline = time.monotonic() + warm_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if not proc.alive():
                    raise BenchError(f"node: {name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            text = worker.log_path.read_text(errors="replace")
            if "succeeded in" in text or " failed: " in text or "raised unexpected" in text:
                log("node: the worker ran its first rollup (its Spark session is warm)")
                return
            time.sleep(1.0)
        log(f"node: no rollup finished within {warm_s:.0f} s; going on")

    def pids(self) -> list[int]:
        """The companions and their descendants (the worker's Spark JVM)."""
        return [pid for proc in self.procs.values() if proc.alive() for pid in descendants(proc.pid)]

    def alive(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.alive()]

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop(grace=10.0)


def fmt_errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(errors.items()) if count) or "0"


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


@dataclass
class Options:
    quick: bool
    window_s: float
    warmup_s: float
    processes: int
    server_module: str
    server_env: dict[str, str]
    app_dir: Path
    max_broker_conns: int
    batch: int
    out_dir: Path
    run_id: str
    bootstrap: str
    broker_port: int
    broker_pid: int | None
    registry: str | None = None  # a schema registry's Confluent API, for scenarios with Avro values
    baseline: bool = False  # the server is bench/baseline_server.py's live mode, not the platform
    edge: str = "none"  # "haproxy" or "nginx": one server process behind that edge, on a loopback port
    label: str = ""  # how the table names this configuration (`--configs`)
    route: dict[str, Any] = field(default_factory=dict)  # more of the route (do_put_route's arguments): --shaped
    query: str = ""  # what each stream's URL ends with (`?delta=merge-patch`): --shaped
    key: str = ""  # every message's key (a hot key): --key
    rate: int | None = None  # the topic rate of a cell instead of its scenario's: --shaped's `plain_rate`
    node: bool = False  # the server is platform/web.py as `make run` starts it: its default workers, its edge, limits
    source_addresses: int = 0  # the load generator's loopback source addresses (0: all from 127.0.0.1)
    message_bytes: int = MESSAGE_BYTES  # the producer's message size


# HAProxy to the server over loopback TCP, as platform/web.py had it before its Unix sockets: for a checkout of then
# (--configs before=<checkout>:haproxy-tcp), whose haproxy.cfg forwards to host:port.
TCP_EDGE = "haproxy-tcp"
TCP_UPSTREAM_BUFFER = 65536  # the server's send buffer on those connections, as platform/web.py set it then
EDGES = ("none", "haproxy", "nginx", TCP_EDGE)
EDGE_NOFILE = 20_000  # what an edge process may open: two descriptors per stream it carries


class Scenario:
    """One topic, one route, one fresh server; everything it starts is stopped by `close()`."""

    started: ClassVar[int] = 0  # scenarios started in this run

    def __init__(
        self, opts: Options, name: str, *, start: str, server_env: dict[str, str] | None = None, values: str = "json"
    ) -> None:
        self.opts = opts
        self.name = name
        self.values = values  # "json", or "avro": through the registry, decoded by the server
        Scenario.started += 1  # a scenario run again gets a topic and logs of its own
        slug = ("baseline-" if opts.baseline else "") + name.replace(" ", "-") + f"-{Scenario.started}"
        self.topic = f"bench-{opts.run_id}-{slug}"
        self.path = f"/bench/{opts.run_id}/{slug}"
        self.route = self.topic
        self.port = free_port()
        self.procs: list[Proc] = []
        self.server: Proc | None = None
        self.loadgen: LoadGen | None = None
        self.producer: Proc | None = None
        self.guard_tripped: str | None = None
        self.max_broker_conns = 0
        self._guard_stop = threading.Event()
        self._guard: threading.Thread | None = None
        self.server_env = {**opts.server_env, **(server_env or {})}
        self.start = start
        self.edge: Proc | None = None
        self.effective_env: dict[str, str] = {}  # what the server was started with
        self.edge_kind = "none" if opts.baseline or opts.processes != 1 or opts.node else opts.edge
        self.upstream_socket: socket.socket | None = None  # the server's, behind an edge
        self.upstream_port = 0
        self.upstream_path = ""
        self.edge_token = secrets.token_urlsafe(32)

    # set-up ---------------------------------------------------------------

    def open(self) -> None:
        create_topic(self.opts.bootstrap, self.topic)
        if self.values == "avro":
            self.put_models()
        put_route(self.route, self.path, self.topic, self.start, **self.opts.route)
        self.start_server()

    def put_models(self) -> None:
        """A catalog for the registry and an `avro` value model for the topic, in the control plane."""
        from bindings.services import do_put_catalog, do_put_topic_model  # noqa: PLC0415  (after django.setup())

        if self.opts.registry is None:
            raise BenchError("Avro values need a schema registry")
        do_put_catalog(name=self.topic, kind="schema-registry", url=self.opts.registry)
        do_put_topic_model(topic=self.topic, value={"model": "avro", "catalog": self.topic, "strategy": "topic"})

    def log_path(self, what: str) -> Path:
        return self.opts.out_dir / f"{self.topic}-{what}.log"

    def start_server(self) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local"),
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        if not self.opts.node:
            # The load generator's thousands of clients all come from 127.0.0.1 (unless --source-addresses); a node
            # as `make run` starts it keeps its per-address limits.
            env |= {"SSE_MAX_STREAMS_PER_CLIENT": "0", "SSE_MAX_CONNECTIONS_PER_CLIENT": "0"}
        env |= self.server_env
        if self.opts.baseline:
            argv = [PY, str(BENCH / "baseline_server.py"), "--port", str(self.port)]
            argv += ["--kafka", self.opts.bootstrap, "--topic", self.topic]
        elif self.opts.node:
            # platform/web.py as the Procfile runs it: its default worker count (unless --processes), its HAProxy
            # edge, its backlog. Plain HTTP only: the load generator speaks nothing else.
            env |= {"WEB_HOST": "127.0.0.1", "WEB_PORT": str(self.port), "WEB_TLS_PORT": "off"}
            if self.opts.processes:
                env["WEB_PROCESSES"] = str(self.opts.processes)
            if self.opts.server_module != "streams.server":
                env["WEB_SERVER_MODULE"] = self.opts.server_module
            argv = [PY, str(self.web_py())]
        elif self.opts.processes == 1:
            endpoint = f"tcp:port={self.port}:interface=127.0.0.1:backlog=4096"
            argv = [PY, "-m", self.opts.server_module, "-v", "0", "-e", endpoint, "config.asgi:application"]
        else:
            env |= {
                "WEB_HOST": "127.0.0.1",
                "WEB_PORT": str(self.port),
                "WEB_PROCESSES": str(self.opts.processes),
                "WEB_BACKLOG": "4096",
                "WEB_TLS_PORT": "off",  # plain HTTP only: the load generator speaks nothing else
                "WEB_SERVER_MODULE": self.opts.server_module,
                "WEB_DAPHNE_ARGS": "-v 0",
            }
            argv = [PY, str(self.web_py())]
        if self.edge_kind != "none":
            argv = self.behind_edge(argv)
            env["SSE_EDGE_TOKEN"] = self.edge_token
        self.effective_env = env
        fds = (self.upstream_socket.fileno(),) if self.upstream_socket is not None else ()
        server = Proc("server", argv, log_path=self.log_path("server"), env=env, cwd=self.opts.app_dir, pass_fds=fds)
        self.server = self.spawn(server)
        if self.edge_kind != "none":
            self.start_edge()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.server.alive():
                raise BenchError(f"server exited with {self.server.popen.returncode}:\n{self.server.tail()}")
            if self.health(limit_s=1.0) is not None and len(self.server_pids()) == self.expected_workers():
                return
            time.sleep(0.2)
        raise BenchError(f"server not ready within 60s:\n{self.server.tail()}")

    def web_py(self) -> Path:
        web = self.opts.app_dir / "platform" / "web.py"  # its workers run the code beside it
        if not web.exists():
            raise BenchError(f"--processes {self.opts.processes} and --node need {web}")
        return web

    def expected_workers(self) -> int:
        """The server processes to wait for: platform/web.py's workers (its default count with --node)."""
        if self.opts.baseline:
            return 1
        if self.opts.node and not self.opts.processes:
            return int(self.effective_env.get("WEB_PROCESSES") or max(1, (os.cpu_count() or 1) // 2))
        return self.opts.processes

    def uses_web_py(self) -> bool:
        return not self.opts.baseline and (self.opts.node or self.opts.processes != 1)

    def behind_edge(self, argv: list[str]) -> list[str]:
        """The server's command line behind the edge, believing the edge's headers: on Unix sockets as
        platform/web.py's workers are (the server binds them), or with `haproxy-tcp` on a loopback TCP port as they
        were before (its accepted connections' send buffer held to the edge's size), to measure the difference."""
        sys.path.append(str(ROOT / "platform"))  # no package: its modules import each other by file name
        import edge_process  # noqa: PLC0415

        at = argv.index("-e")
        if self.edge_kind != TCP_EDGE:
            self.upstream_path = tempfile.mkdtemp(prefix="bench-edge-")  # short: a Unix socket's name is
            endpoints = []
            for index in range(edge_process.SOCKETS):
                path = f"{self.upstream_path}/{edge_process.socket_name(index)}"
                endpoints += ["-e", f"unix:address={path}:backlog=4096:lockfile=0"]
            return [*argv[:at], *endpoints, "--proxy-headers", *argv[at + 2 :]]
        self.upstream_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.upstream_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TCP_UPSTREAM_BUFFER)
        self.upstream_socket.bind(("127.0.0.1", 0))
        self.upstream_socket.listen(4096)
        self.upstream_socket.setblocking(False)
        self.upstream_socket.set_inheritable(True)
        self.upstream_port = self.upstream_socket.getsockname()[1]
        return [*argv[:at], "--fd", str(self.upstream_socket.fileno()), "--proxy-headers", *argv[at + 2 :]]

    def start_edge(self) -> None:
        """The edge on 127.0.0.1:`port`, forwarding to the server's socket."""
        upstream = f"127.0.0.1:{self.upstream_port}" if self.edge_kind == TCP_EDGE else self.upstream_path
        argv, env = edge_command(
            self.edge_kind.removesuffix("-tcp"), self.opts, self.port, upstream, token=self.edge_token,
            server_env=self.effective_env,
        )  # fmt: skip
        self.edge = self.spawn(Proc(self.edge_kind, argv, log_path=self.log_path(self.edge_kind), env=env))

    def edge_pids(self) -> list[int]:
        """The edge's processes (nginx: its master and workers)."""
        if self.uses_web_py() and self.server is not None and self.server.alive():
            return [pid for pid in children(self.server.pid) if is_edge(pid)]  # platform/web.py's own HAProxy
        if self.edge is None or not self.edge.alive():
            return []
        return [self.edge.pid, *children(self.edge.pid)]

    def spawn(self, proc: Proc) -> Proc:
        self.procs.append(proc)
        return proc

    def ask(self, command: dict[str, Any], limit_s: float) -> dict[str, Any]:
        """A load generator command; fails the scenario once the guard has tripped or the server has died."""
        assert self.loadgen is not None
        reply = self.loadgen.ask(command, limit_s)
        if self.guard_tripped:
            raise BenchError(self.guard_tripped)
        if self.server is not None and not self.server.alive():
            raise BenchError(f"server exited with {self.server.popen.returncode}:\n{self.server.tail()}")
        return reply

    def start_loadgen(self) -> LoadGen:
        self.loadgen = LoadGen(self.port, self.log_path("loadgen"), source_addresses=self.opts.source_addresses)
        self.procs.append(self.loadgen)
        return self.loadgen

    def start_producer(self, rate: float, *, count: int = 0, wait_s: float = 20.0) -> Proc:
        argv = [PY, str(BENCH / "producer.py"), "--bootstrap", self.opts.bootstrap, "--topic", self.topic]
        argv += ["--rate", str(rate), "--partitions", str(PARTITIONS), "--size", str(self.opts.message_bytes)]
        argv += ["--count", str(count), "--linger-ms", "5"]
        if self.opts.key:
            argv += ["--key", self.opts.key]
        if self.values == "avro":
            argv += ["--avro", self.opts.registry or ""]
        self.producer = self.spawn(Proc("producer", argv, log_path=self.log_path("producer")))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if '"ready"' in self.producer.log_path.read_text(errors="replace"):
                return self.producer
            if not self.producer.alive():
                raise BenchError(f"producer exited early:\n{self.producer.tail()}")
            time.sleep(0.05)
        raise BenchError(f"producer sent nothing within {wait_s:.0f}s:\n{self.producer.tail()}")

    # readings ---------------------------------------------------------------

    def server_pids(self) -> list[int]:
        if self.server is None or not self.server.alive():
            return []
        if not self.uses_web_py():
            return [self.server.pid]
        return [pid for pid in children(self.server.pid) if not is_edge(pid)]  # platform/web.py's workers

    def tree_pids(self) -> list[int]:
        """The server and all its descendants: web.py, its workers, their fetch and host processes."""
        if self.server is None or not self.server.alive():
            return []
        return descendants(self.server.pid)

    def kafka_pids(self) -> list[int]:
        pids = [self.producer.pid] if self.producer is not None and self.producer.alive() else []
        return pids + ([self.opts.broker_pid] if self.opts.broker_pid else [])

    def health(self, limit_s: float = 5.0) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{self.port}/-/health"
        try:
            with urllib.request.urlopen(url, timeout=limit_s) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def broker_conns(self) -> int:
        return connections_to(self.server_pids(), self.opts.broker_port)

    # the guard: a benchmark must not take the shared broker down --------------

    def guard(self) -> None:
        def watch() -> None:
            while not self._guard_stop.wait(0.5):
                conns = self.broker_conns()
                self.max_broker_conns = max(self.max_broker_conns, conns)
                limit = self.opts.max_broker_conns
                if limit and conns > limit and self.guard_tripped is None:
                    self.guard_tripped = (
                        f"aborted: the server held {conns} connections to the broker (> --max-broker-connections "
                        f"{limit}), i.e. Kafka consumers per client; it was killed to protect the shared broker"
                    )
                    log(self.guard_tripped)
                    for pid in self.server_pids():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    if self.server is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(self.server.pid, signal.SIGKILL)

        self._guard = threading.Thread(target=watch, daemon=True)
        self._guard.start()

    # tear-down --------------------------------------------------------------

    def close(self) -> None:
        self._guard_stop.set()
        if self._guard is not None:
            self._guard.join(5)
        for proc in reversed(self.procs):
            proc.stop()
        if self.upstream_socket is not None:
            self.upstream_socket.close()
        if self.upstream_path:
            shutil.rmtree(self.upstream_path, ignore_errors=True)
        with contextlib.suppress(Exception):
            delete_route(self.route)
        if self.values == "avro":
            delete_models(self.topic)
        with contextlib.suppress(Exception):
            delete_topic(self.opts.bootstrap, self.topic)


def edge_command(
    kind: str, opts: Options, port: int, upstream: str, *, token: str, server_env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The edge's command line and environment: HAProxy as platform/web.py runs it (its configuration, its
    variables), or nginx from bench/edge/nginx.conf with the same bounds."""
    sys.path.append(str(ROOT / "platform"))  # no package: its modules import each other by file name
    import edge_process  # noqa: PLC0415

    env = edge_process.environment(host="127.0.0.1", port=port, tls_port=None, pem=None, upstream=upstream, token=token)
    # The server's own settings, as the edge would have been given them with it.
    for name in ("HTTP_HEADER_TIMEOUT_S", "HTTP_IDLE_TIMEOUT_S", "HTTP_BODY_TIMEOUT_S", "SSE_CLIENT_IPV6_PREFIX"):
        env[name] = server_env.get(name, env[name])
    per_address = int(server_env.get("SSE_MAX_CONNECTIONS_PER_CLIENT", env["SSE_MAX_CONNECTIONS_PER_CLIENT"]))
    env["SSE_MAX_CONNECTIONS_PER_CLIENT"] = str(per_address or edge_process.UNLIMITED)
    if kind == "haproxy":
        config = opts.app_dir / "platform" / "edge" / "haproxy.cfg"
        env["EDGE_DIR"] = str(config.parent)
        return [edge_process.find_haproxy(), "-db", "-f", str(config)], env
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = opts.out_dir / f"nginx-{opts.run_id}-{port}"
    for sub in ("body", "proxy"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    limit = per_address if per_address else 0
    fields = {
        "nofile": str(EDGE_NOFILE),
        "connections": str(EDGE_NOFILE // 2),
        "prefix": str(prefix),
        "header_timeout": env["HTTP_HEADER_TIMEOUT_S"],
        "body_timeout": env["HTTP_BODY_TIMEOUT_S"],
        "idle_timeout": env["HTTP_IDLE_TIMEOUT_S"],
        "max_body": env["EDGE_MAX_BODY_BYTES"],
        # The server's Unix sockets (one `server` each, tried in turn when one's queue is full), or host:port.
        "servers": " ".join(
            f"server unix:{upstream}/{edge_process.socket_name(index)};" for index in range(edge_process.SOCKETS)
        )
        if not upstream.count(":")
        else f"server {upstream};",
        "token": token,
        "port": str(port),
        "limit_zone": "limit_conn_zone $binary_remote_addr zone=per_address:10m;" if limit else "",
        "limit_conn": f"limit_conn per_address {limit};" if limit else "",
    }
    template = string.Template((BENCH / "edge" / "nginx.conf").read_text())
    config_path = prefix / "nginx.conf"
    config_path.write_text(template.substitute(fields))
    return [nginx, "-p", str(prefix), "-c", str(config_path)], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


# --------------------------------------------------------------------------
# Kafka and Django helpers
# --------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "bench"})
    futures = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
    try:
        futures[name].result(timeout=20)
    except Exception as exc:
        raise BenchError(f"cannot create topic {name}: {exc}") from exc


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "bench"})
    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=15)


def put_route(name: str, path: str, topic: str, start: str, **more: Any) -> None:
    from bindings.services import do_put_route  # noqa: PLC0415  (needs django.setup() first)

    do_put_route(name=name, path=path, topic=topic, start=start, **more)


def delete_models(topic: str) -> None:
    from bindings.services import do_delete_catalog, do_delete_topic_model  # noqa: PLC0415  (after django.setup())

    with contextlib.suppress(Exception):
        do_delete_topic_model(topic)
    with contextlib.suppress(Exception):
        do_delete_catalog(topic)


def delete_route(name: str) -> None:
    from bindings.services import do_delete_route  # noqa: PLC0415  (needs django.setup() first)

    do_delete_route(name)


def load_services_env() -> None:
    """The embedded services' URLs: from the environment (with-services.sh), else var/services.env."""
    needed = ("DATABASE_URL", "REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")
    env_file = ROOT / "var" / "services.env"
    if not all(os.environ.get(k) for k in needed) and env_file.exists():
        for line in env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() in needed:
                os.environ.setdefault(key.strip(), value.strip())
    missing = [k for k in needed if not os.environ.get(k)]
    if missing:
        sys.exit(
            f"{tool()}: {', '.join(missing)} unset and no var/services.env: run through "
            f"`platform/with-services.sh -- .venv/bin/python bench/{tool()}.py` (or `make services-up` first)"
        )


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def start_registry(logfile: Path) -> Any:
    """A fresh Apicurio Registry for the run (platform/embedded_registry.py, as the tests start theirs): its
    `url` is the Confluent API, `stop()` ends it."""
    sys.path.append(str(ROOT / "platform"))  # no package: its modules import each other by file name
    import embedded_registry  # noqa: PLC0415

    return embedded_registry.start(logfile)


def broker_pid(port: int) -> int | None:
    pid_file = ROOT / "var" / "kafka" / "kafka.pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().split()[0])
        if cpu_ticks(pid) is not None and connections_listening(pid, port):
            return pid
    return None


def connections_listening(pid: int, port: int) -> bool:
    inodes = socket_inodes([pid])
    with contextlib.suppress(OSError), open("/proc/net/tcp") as lines:
        for line in list(lines)[1:]:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port and parts[9] in inodes:
                return True
    return False


def tool() -> str:
    """The benchmark running (fanout, soak), for messages and file names."""
    return Path(sys.argv[0]).stem or "bench"


def add_server_args(parser: argparse.ArgumentParser, *, processes: int) -> None:
    """The options of the server under test and of the guard, the same in every benchmark."""
    parser.add_argument(
        "--processes", type=int, default=processes, help=f"web processes (>1 runs platform/web.py; default {processes})"
    )
    parser.add_argument(
        "--server-module",
        default="streams.server",
        help="the server runs as `python -m MODULE` (default streams.server: daphne with flow control)",
    )
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="extra server environment"
    )
    parser.add_argument("--app-dir", type=Path, default=ROOT, help="the checkout the server runs (default: this one)")
    parser.add_argument(
        "--max-broker-connections",
        type=int,
        default=3000,
        help="kill the server and abort the scenario past this many server->broker connections\n"
        "(default 3000; protects the shared embedded broker; 0 = no limit)",
    )
    parser.add_argument("--batch", type=int, default=200, help="connections opened at once while connecting")
    parser.add_argument(
        "--configs",
        type=parse_configs,
        default=[],
        metavar="LABEL=DIR:EDGE,...",
        help="servers to run each scenario against, alternating their order from one scenario to the next:\n"
        "LABEL names the rows, DIR the checkout (as --app-dir), EDGE none, haproxy or nginx (one server process\n"
        "behind that edge); e.g. before=/tmp/old:none,worker=.:none,haproxy=.:haproxy,nginx=.:nginx",
    )


def parse_configs(text: str) -> list[tuple[str, Path, str]]:
    configs = []
    for item in text.split(","):
        label, _, rest = item.strip().partition("=")
        directory, _, edge = rest.rpartition(":")
        if not label or not directory or edge not in EDGES:
            raise argparse.ArgumentTypeError(f"{item!r}: want LABEL=DIR:EDGE with EDGE one of {', '.join(EDGES)}")
        configs.append((label, Path(directory).resolve(), edge))
    return configs


def configurations(opts: Options, configs: list[tuple[str, Path, str]], index: int) -> list[Options]:
    """`opts` for each of `configs` (just `opts` without any), rotated by `index` so that the order alternates."""
    if not configs:
        return [opts]
    each = [dataclasses.replace(opts, label=label, app_dir=directory, edge=edge) for label, directory, edge in configs]
    shift = index % len(each)
    return each[shift:] + each[:shift]


def make_options(args: argparse.Namespace, *, window_s: float = 0.0, warmup_s: float = 0.0) -> Options:
    """The run's options, from the arguments `add_server_args` declared (Django set up first)."""
    bootstrap: str = settings.KAFKA.bootstrap_servers
    first = bootstrap.split(",", maxsplit=1)[0]
    if first.rsplit(":", 1)[0] not in {"127.0.0.1", "localhost"}:
        sys.exit(f"{tool()}: the broker {first} is not on 127.0.0.1; this benchmark only talks to the local one")
    broker_port = int(first.rsplit(":", 1)[1])
    out_dir = ROOT / "var" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    return Options(
        quick=args.quick,
        window_s=window_s,
        warmup_s=warmup_s,
        processes=args.processes,
        server_module=args.server_module,
        server_env=dict(kv.split("=", 1) for kv in args.server_env),
        app_dir=args.app_dir.resolve(),
        max_broker_conns=args.max_broker_connections,
        batch=args.batch,
        out_dir=out_dir,
        run_id=dt.datetime.now().strftime("%m%d%H%M%S"),
        bootstrap=bootstrap,
        broker_port=broker_port,
        broker_pid=broker_pid(broker_port),
    )
