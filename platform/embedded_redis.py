"""Debian's redis-server with a generated config file, under var/redis/."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

from embedded import (
    HOST,
    PidfileService,
    ServiceError,
    log,
    pick_port,
    pid_alive,
    read_int,
    run,
    wait_ready,
    write_text,
)

# How long redis-server may take to write its pidfile before we call it dead.
REDIS_PIDFILE_GRACE = 10.0


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
