"""Apicurio Registry as the tests' schema registry: Confluent's API under /apis/ccompat/v7, storage in memory.

Producers that frame their records for a schema registry (a magic byte and a schema id) need a real one to
register with, and so do the tests of decoding such records. Apicurio Registry serves Confluent's REST API
besides its own; its release on Maven Central is the application built already (a Quarkus runner jar and its
lib/), which `platform/install.sh` unpacks once into `app_dir()`, a cache outside the checkout named after the
hash of `platform/registry/pom.xml`, as it does Kafka's jars. Each start is a fresh registry: its storage is an
H2 database in memory (Apicurio's default), so nothing outlives the process and no state lives under var/.

Run as a script, ``embedded_registry.py app-dir`` prints where the application belongs (for install.sh), and
``embedded_registry.py run [PORT]`` runs one in the foreground until Ctrl-C.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from http import HTTPStatus
from pathlib import Path

from embedded import HOST, ROOT, VAR, ServiceError, pick_port, wait_ready
from embedded_kafka import java

from config.jar_cache import pom_dir

POM = ROOT / "platform" / "registry" / "pom.xml"

# Confluent's schema registry API, as Apicurio serves it: what clients are given as the registry's URL.
CONFLUENT_API = "/apis/ccompat/v7"

# A bounded heap: the tests' registry holds a few dozen schemas. SerialGC and C1 only start fastest (about 3 s)
# and keep the JVM near 170 MB resident.
JVM_FLAGS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

# Quarkus reads its configuration from system properties too. Apicurio's SQL storage opens 20 connections at
# start by default; one is plenty for an H2 database in memory. The access log would note every poll.
SETTINGS = {
    "apicurio.storage.kind": "sql",
    "apicurio.datasource.jdbc.initial-size": "1",
    "apicurio.datasource.jdbc.min-size": "1",
    "apicurio.datasource.jdbc.max-size": "10",
    "quarkus.http.access-log.enabled": "false",
}

START_TIMEOUT = 90.0  # a cold JVM on two busy cores: seconds are usual, tens possible
STOP_GRACE = 10.0


def app_dir() -> Path:
    """Where install.sh unpacks the application of the pom as it is now."""
    return pom_dir("registry", POM)


def runner_jar() -> Path:
    """The application's runner jar; a clear error when install.sh has not run."""
    app = app_dir()
    jars = sorted(app.glob("*-runner.jar")) if (app / ".complete").exists() else []
    if not jars:
        raise ServiceError(f"Apicurio Registry is not in {app}: run platform/install.sh")
    return jars[0]


def command(port: int) -> list[str]:
    """``java <flags> -D<settings> -jar <runner>`` listening on 127.0.0.1:`port`."""
    settings = {**SETTINGS, "quarkus.http.host": HOST, "quarkus.http.port": str(port)}
    return [java(), *JVM_FLAGS, *(f"-D{key}={value}" for key, value in settings.items()), "-jar", str(runner_jar())]


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether `url` (a registry's Confluent API) lists its subjects: the storage is up, not just the port."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=timeout) as response:  # noqa: S310  (our http URL)
            return bool(response.status == HTTPStatus.OK)
    except (urllib.error.URLError, OSError):
        return False


class Registry:
    """One running registry: its process, its port and the URL of its Confluent API."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, logfile: Path) -> None:
        self.process, self.port, self.logfile = process, port, logfile
        self.url = f"http://{HOST}:{port}{CONFLUENT_API}"

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM (Quarkus shuts down in well under a second), then SIGKILL after `grace` s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(logfile: Path, port: int | None = None, timeout: float = START_TIMEOUT) -> Registry:
    """Start a registry on `port` (a free one when None or taken) and return once its Confluent API answers.

    Its output goes to `logfile`, rewritten; the process runs in a session of its own, in `logfile`'s directory.
    """
    port = pick_port(port)
    cmd = command(port)
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with logfile.open("wb") as out:
        process = subprocess.Popen(
            cmd,
            cwd=logfile.parent,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    registry = Registry(process, port, logfile)
    try:
        wait_ready("schema registry", lambda: answers(registry.url), lambda: process.poll() is None, logfile, timeout)
    except BaseException:
        registry.stop()
        raise
    return registry


def main(argv: list[str]) -> int:
    if argv == ["app-dir"]:
        print(app_dir())
        return 0
    verb, *port = argv or [""]
    if verb == "run" and len(port) <= 1 and all(arg.isdigit() for arg in port):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the registry on the way out, as on Ctrl-C
        registry = start(VAR / "schema-registry.log", int(port[0]) if port else None)
        print(f"schema registry: {registry.url} (log: {registry.logfile}); Ctrl-C stops it", flush=True)
        try:
            registry.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            registry.stop()
        return 0
    print("usage: embedded_registry.py app-dir | run [PORT]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
