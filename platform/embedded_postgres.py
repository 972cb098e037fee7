"""PostgreSQL 15 from Debian's binaries: a cluster of this checkout under var/postgres/."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from embedded import (
    HOST,
    ROOT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    VAR,
    Service,
    ServiceError,
    log,
    log_tail,
    pick_port,
    pid_runs,
    read_int,
    run,
    wait_gone,
    wait_ready,
    write_text,
)

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
PG_DB = "platform"
# Longest unix socket path (sun_path) postgres accepts, minus some slack.
MAX_SOCKET_PATH = 100
# Line of postmaster.pid holding the port (0-based).
POSTMASTER_PID_PORT_LINE = 3
# How long redis-server may take to write its pidfile before we call it dead.


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
        """A directory in /tmp (the temp dir) the postgres user can reach, one per checkout (or ``SSE_VAR_DIR``)."""
        digest = hashlib.sha256(str(ROOT if VAR == ROOT / "var" else VAR).encode()).hexdigest()[:12]
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
