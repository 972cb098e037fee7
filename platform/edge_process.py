"""The edge platform/web.py runs in front of its workers: HAProxy with platform/edge/haproxy.cfg.

The edge listens on ``WEB_HOST``:``WEB_PORT`` (HTTP/1.1) and, unless ``WEB_TLS_PORT=off``, on ``WEB_TLS_PORT``
(HTTPS, HTTP/2 and HTTP/1.1 through ALPN); it terminates TLS and HTTP/2, applies the connection-level policy and
hands each request over HTTP/1.1 to the workers, which accept on `SOCKETS` Unix sockets in a directory of the
supervisor's own (mode 0700). Every request it hands on carries its token (`new_token`, made at each start), which
the workers check before they believe its forwarded headers. Unix sockets rather than a loopback TCP port: their
connections cost the worker a third less CPU per write; several of them, because a connect to a full Unix socket
fails at once where TCP would try again (docs/decisions/0013, "What it costs"). Its configuration reads the
variables `environment` gives it, from the platform's own settings (config/settings/streams.py), so the bounds it
keeps are the ones the README documents. Why HAProxy: docs/decisions/0013-an-edge-in-front-of-daphne.md.

Nothing here starts a process: `Edge` says what to run; the supervisor runs it, restarts it and stops it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "platform" / "edge" / "haproxy.cfg"
# What the edge compares a count against when the setting says 0 (no limit): more than any client holds.
UNLIMITED = 1_000_000_000


# The workers' Unix sockets behind the edge (platform/web.py), one server each in haproxy.cfg: a connect that finds
# one's queue full is retried on the next at once, so their queues add up in a reconnect storm.
SOCKETS = 4


def socket_name(index: int) -> str:
    """The name of the workers' socket `index` in their directory, as haproxy.cfg names it."""
    return f"workers-{index}.sock"


class EdgeError(Exception):
    """The edge cannot start: the message says why."""


@dataclass(frozen=True)
class Edge:
    """HAProxy's command line and environment, and the workers' socket it forwards to."""

    binary: str
    upstream: str  # the directory of the workers' Unix sockets (`socket_name`)
    tls_pem: Path | None
    token: str
    env: dict[str, str]

    def argv(self) -> list[str]:
        # -db: in the foreground, as a child of the supervisor, which forwards its signals.
        return [self.binary, "-db", "-f", str(CONFIG)]

    def check(self) -> None:
        """Fail with HAProxy's own words if it would not start with this configuration (a port, a certificate)."""
        done = subprocess.run(
            [self.binary, "-c", "-q", "-f", str(CONFIG)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise EdgeError(f"HAProxy refuses its configuration:\n{(done.stderr or done.stdout).strip()}")


def find_haproxy() -> str:
    found = shutil.which("haproxy") or next(
        (str(path) for path in (Path("/usr/sbin/haproxy"), Path("/usr/local/sbin/haproxy")) if path.exists()), None
    )
    if found is None:
        raise EdgeError(
            "WEB_EDGE=haproxy needs HAProxy, which platform/install.sh installs (Debian's haproxy); "
            "or serve without the edge: WEB_EDGE=off (docs/operations.md, 'Behind a proxy')"
        )
    return found


def new_token() -> str:
    """What the edge says to the workers on every request it hands on: 256 random bits."""
    return secrets.token_urlsafe(32)


def private_directory(parent: Path) -> Path:
    """A directory only this user may enter, for this supervisor's TLS key: ``web-<pid>`` under `parent`.
    Those of supervisors no longer running (killed before they could clean up) are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob("web-*"):
        pid = stale.name.removeprefix("web-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    private = parent / f"web-{os.getpid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    private.chmod(0o700)
    return private


def tls_pem(directory: Path, cert: Path, key: Path) -> Path:
    """The certificate (and chain) and key in the one PEM file HAProxy reads, in the private `directory`."""
    path = directory / "edge.pem"
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".edge-", suffix=".pem")
    with os.fdopen(handle, "wb") as out:
        out.write(cert.read_bytes().rstrip(b"\n") + b"\n" + key.read_bytes())
    os.replace(temporary, path)
    return path


def environment(
    *,
    host: str,
    port: int,
    tls_port: int | None,
    pem: Path | None,
    upstream: str,
    token: str,
) -> dict[str, str]:
    """The variables platform/edge/haproxy.cfg reads, from the platform's settings (a bad one stops us here)."""
    from config.settings import streams  # noqa: PLC0415  (reads and checks the environment when imported)

    django_prefixes = [prefix for prefix in streams.SSE_RESERVED_PREFIXES if prefix != "/-/"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "WEB_HOST": host,
        "WEB_PORT": str(port),
        "EDGE_UPSTREAM": upstream,
        "EDGE_TOKEN": token,
        "EDGE_DIR": str(CONFIG.parent),
        "EDGE_DJANGO_PREFIXES": " ".join(django_prefixes) or "/",
        "EDGE_MAX_BODY_BYTES": str(streams.DATA_UPLOAD_MAX_MEMORY_SIZE),
        "HTTP_HEADER_TIMEOUT_S": str(streams.HTTP_HEADER_TIMEOUT_S),
        "HTTP_IDLE_TIMEOUT_S": str(streams.HTTP_IDLE_TIMEOUT_S),
        "HTTP_BODY_TIMEOUT_S": str(streams.HTTP_BODY_TIMEOUT_S),
        "SSE_MAX_CONNECTIONS_PER_CLIENT": str(streams.SSE_MAX_CONNECTIONS_PER_CLIENT or UNLIMITED),
        "SSE_CLIENT_IPV6_PREFIX": str(streams.SSE_CLIENT_IPV6_PREFIX),
    }
    if tls_port is not None and pem is not None:
        env |= {"WEB_TLS_PORT": str(tls_port), "EDGE_TLS_PEM": str(pem)}
    return env
