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
State lives under ``<repo>/var/`` (``$SSE_VAR_DIR`` when set); ``var/services.env`` holds the ``KEY=value``
lines of the embedded services currently running.  Progress goes to stderr.

Kafka is Apache Kafka: one KRaft node (broker and controller), its jars fetched by
install.sh, its data kept under ``var/kafka/data`` across restarts.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import IO

from embedded import VAR, Service, ServiceError, log, write_text
from embedded_kafka import Kafka
from embedded_postgres import Postgres
from embedded_redis import Redis

from config.env import SERVICES_ENV, read_env_file

LOCK_FILE = VAR / ".services.lock"

SERVICES: dict[str, Service] = {svc.name: svc for svc in (Postgres(), Redis(), Kafka())}


# --------------------------------------------------------------------------
# services.env, locking
# --------------------------------------------------------------------------


def write_env_file(entries: dict[str, str]) -> None:
    """Rewrite var/services.env (removed when there is nothing to list)."""
    if not entries:
        SERVICES_ENV.unlink(missing_ok=True)
        return
    order = [svc.env_key for svc in SERVICES.values()]
    keys = sorted(entries, key=lambda k: order.index(k) if k in order else len(order))
    write_text(SERVICES_ENV, "".join(f"{key}={entries[key]}\n" for key in keys))


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
    # Only what the environment itself says: var/services.env is ours to rewrite, not a setting.
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
    if args.command == "up":
        # SIGTERM (make passes it on) and a closed terminal interrupt a start like Ctrl-C does: what this call
        # started is stopped again, none of it left behind.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.default_int_handler)
    elif args.command == "down":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a stop under way finishes when the terminal closes
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
