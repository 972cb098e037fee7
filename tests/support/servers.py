"""Real processes the integration tests start themselves: daphne, Apache Kafka brokers, a cuttable TCP proxy,
a schema registry.

Not a conftest: test modules import what they need. Nothing here imports `tests.conftest` (conftest imports
this module).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
VAR = ROOT / "var"
HOST = "127.0.0.1"
STOP_GRACE_S = 10.0


def in_var(name: str, extension: str = "") -> Path:
    """var/<name><extension> of this pytest process: `make test` runs two side by side (platform/test.sh), told apart
    by TEST_DB_SUFFIX, and what the tests keep there by a fixed name (a server's log, a cluster's data) is one each."""
    return VAR / f"{name}{os.environ.get('TEST_DB_SUFFIX', '')}{extension}"


SUPERVISOR_LOG = in_var("test-web-supervisor", ".log")  # every platform/web.py this process starts appends to it


# platform/ is deliberately no package (one named `platform` would shadow the standard library's); its modules
# import each other by file name, so the tests reach them the same way and take the helpers `make` runs instead
# of copies.
sys.path.append(str(ROOT / "platform"))
import embedded  # noqa: E402
import embedded_kafka  # noqa: E402
import embedded_registry  # noqa: E402


def free_port() -> int:
    return int(embedded.pick_port(None))


def _wait_for(what: str, condition: Callable[[], bool], timeout: float, log_path: Path | None = None) -> None:
    """Poll `condition` until it holds; fail with `what` (and the log's tail) at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = f":\n{_tail(log_path)}" if log_path else ""
            pytest.fail(f"{what} not within {timeout} s{tail}")
        time.sleep(0.1)


def _tail(path: Path) -> str:
    return str(embedded.log_tail(path, lines=40))


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """Terminate, then kill if it ignores SIGTERM for `grace` s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------
# daphne
# --------------------------------------------------------------------------


class DaphneServer:
    """A daphne process serving the platform on 127.0.0.1:`port`."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.process, self.port, self.log_path = process, port, log_path
        self.url = f"http://{HOST}:{port}"

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        _stop(self.process, grace)


def url_of_test_database() -> str:
    """The pytest test database (its NAME is the test one once pytest-django's `django_db_setup` ran)."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def start_daphne(
    env_overrides: dict[str, str],
    port: int | None = None,
    *,
    log_name: str = "test-daphne-extra",
    module: str = "streams.server",
) -> DaphneServer:
    """Start daphne on the test database and the test services (`env_overrides` win); wait until healthy.

    Its output goes to var/<log_name>.log, rewritten at each start. `module` is what runs (`python -m`).
    """
    port = port or free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "PYTHONFAULTHANDLER": "1",
        "DATABASE_URL": url_of_test_database(),
        "REDIS_URL": settings.REDIS_URL,
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA.bootstrap_servers,
        **env_overrides,
    }
    log_path = in_var(log_name, ".log")
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", module, "-v", "1",
                "-e", f"tcp:port={port}:interface={HOST}:backlog=4096",
                "config.asgi:application",
            ],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = DaphneServer(process, port, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            pytest.fail(f"daphne exited with {process.returncode}:\n{_tail(log_path)}")
        try:
            return httpx.get(f"{server.url}/-/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        _wait_for("daphne healthy", healthy, timeout=30, log_path=log_path)
    except BaseException:
        server.stop()
        raise
    return server


# --------------------------------------------------------------------------
# platform/web.py: several daphne workers on one socket
# --------------------------------------------------------------------------


def children(pid: int) -> set[int]:
    """The live (not zombie) child processes of `pid`, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def workers_of(pid: int) -> set[int]:
    """The web workers among the children of platform/web.py `pid`: all of them but the edge (HAProxy)."""
    return {child for child in children(pid) if not _is_edge(child)}


def edge(pid: int) -> int | None:
    """The edge (HAProxy) platform/web.py `pid` runs, if one runs."""
    return next((child for child in children(pid) if _is_edge(child)), None)


def _is_edge(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "haproxy"
    except OSError:
        return False


def web_environment(port: int, processes: int = 2, **env: str) -> dict[str, str]:
    """The environment platform/web.py runs with in tests: the test services, `port`, `processes` workers, `env`."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": url_of_test_database(),
        "REDIS_URL": settings.REDIS_URL,
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA.bootstrap_servers,
        "WEB_HOST": HOST,
        "WEB_PORT": str(port),
        "WEB_TLS_PORT": str(free_port()),  # not the default 8443, which another run may hold
        "WEB_PROCESSES": str(processes),
        **env,
    }


def start_web(port: int, processes: int = 2, **env: str) -> subprocess.Popen[bytes]:
    environment = web_environment(port, processes, **env)
    VAR.mkdir(exist_ok=True)
    with SUPERVISOR_LOG.open("ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "platform/web.py"], cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT
        )


def web_started(processes: int = 2, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    """platform/web.py on a free port with `processes` workers (or `WEB_PROCESSES`), once they all run and answer."""
    port = free_port()
    process = start_web(port, processes, **env)
    count = int(env.get("WEB_PROCESSES", processes))

    def running() -> bool:
        with_edge = env.get("WEB_EDGE", "haproxy") != "off"
        return (
            len(workers_of(process.pid)) == count and (edge(process.pid) is not None or not with_edge) and healthy(port)
        )

    try:
        _wait_for("platform/web.py's workers", running, timeout=60)
    except BaseException:
        stop_web(process)
        raise
    return process, port


def stop_web(process: subprocess.Popen[bytes]) -> None:
    """Kill the supervisor's workers and the supervisor (a test that failed midway may leave either)."""
    for pid in children(process.pid):
        os.kill(pid, signal.SIGKILL)
    if process.poll() is None:
        process.kill()
        process.wait()


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://{HOST}:{port}/-/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# --------------------------------------------------------------------------
# A TCP proxy that can cut the line
# --------------------------------------------------------------------------


Link = tuple[asyncio.StreamWriter, asyncio.StreamWriter]


class TcpProxy:
    """Forward 127.0.0.1:`port` to 127.0.0.1:`target_port`, with `cut()` to simulate a network outage.

    An asyncio loop in a thread of its own. While cut, current connections are reset and new ones are accepted
    and reset at once: clients see a broker that went away (and reconnect with backoff), not a hang. While
    stalled (`stall()`), every connection stays open and carries nothing: a peer gone silent, which is a hang.
    """

    CHUNK = 65536

    def __init__(self, target_port: int, listen_port: int = 0, *, max_connections: int = 64) -> None:
        self.target_port = target_port
        self.max_connections = max_connections
        self._cut = False
        self._stalled = False
        self._links: set[Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(listen_port), self._loop).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    async def _listen(self, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._accept, HOST, port, backlog=16)

    def _run(self, action: Callable[[], None]) -> None:
        """Run `action` on the proxy's loop and wait for it."""

        async def call() -> None:
            action()

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    def cut(self) -> None:
        """Reset every connection and refuse new ones until `restore()`."""

        def cut() -> None:
            self._cut = True
            self._reset_all()

        self._run(cut)

    def stall(self) -> None:
        """Drop every byte either way, connections kept open and new ones accepted, until `restore()`."""

        def stall() -> None:
            self._stalled = True

        self._run(stall)

    def restore(self) -> None:
        def restore() -> None:
            if self._stalled:  # bytes were dropped mid-stream: no connection can go on
                self._stalled = False
                self._reset_all()
            self._cut = False

        self._run(restore)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            self._cut = True
            self._server.close()
            self._reset_all()
            await self._server.wait_closed()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _reset_all(self) -> None:
        for client, upstream in list(self._links):
            _reset(client)
            _reset(upstream)
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut or len(self._links) >= self.max_connections:
            _reset(writer)
            return
        if self._stalled:
            await self._swallow(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.target_port), 5)
        except (OSError, TimeoutError):
            _reset(writer)
            return
        if self._cut:  # cut while connecting
            _reset(writer)
            _reset(up_writer)
            return
        link = (writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._links.discard(link)
            _reset(writer)
            _reset(up_writer)

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection accepted while stalled: read and drop until it goes (or is reset)."""
        link = (writer, writer)
        self._links.add(link)
        try:
            while await reader.read(self.CHUNK):
                pass
        except OSError:
            pass
        finally:
            self._links.discard(link)
            _reset(writer)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        # Kafka never half-closes: when one side ends, the whole link goes.
        try:
            while data := await source.read(self.CHUNK):
                if self._stalled:
                    continue
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            _reset(sink)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close at once with a RST, dropping anything unsent."""
    transport = writer.transport
    if not transport.is_closing():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()


# --------------------------------------------------------------------------
# Apache Kafka brokers of the tests' own
# --------------------------------------------------------------------------


def kafka_answers(bootstrap: str, brokers: int = 1) -> bool:
    return bool(embedded_kafka.metadata_ready(bootstrap, brokers))


class KafkaCluster:
    """One or three KRaft nodes of Apache Kafka (broker and controller each), every node a JVM of its own.

    Data under var/<name>/ (removed first, so each cluster starts empty). `kill(node_id)` and `start(node_id)`
    break and mend single nodes; `stop()` ends them all.
    """

    def __init__(self, name: str, nodes: list[embedded_kafka.NodeSpec]) -> None:
        self.name, self.nodes = name, {node.node_id: node for node in nodes}
        self.root = in_var(name)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        """Every node's advertised address: what clients should bootstrap from."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    def log_path(self, node_id: int) -> Path:
        return self.root / f"kafka-{node_id}.log"

    def format(self) -> None:
        cluster_id = embedded_kafka.new_cluster_id()
        voters = list(self.nodes.values())
        for node in voters:
            embedded_kafka.write_properties(node, voters)
            embedded_kafka.format_storage(node, cluster_id)

    def start(self, node_id: int) -> None:
        """Start one node (formatted already) and return at once."""
        self.processes[node_id] = embedded_kafka.spawn(self.nodes[node_id], self.log_path(node_id))

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to one node and wait until it has exited."""
        process = self.processes.pop(node_id)
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def wait_ready(self, brokers: int | None = None, timeout: float = 90.0) -> None:
        """Until a metadata request names `brokers` brokers (all by default); fail if a node exits meanwhile."""
        wanted = len(self.nodes) if brokers is None else brokers

        def answers() -> bool:
            for node_id, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(
                        f"Kafka node {node_id} exited with {process.returncode}:\n{_tail(self.log_path(node_id))}"
                    )
            return kafka_answers(self.bootstrap, wanted)

        first = self.log_path(min(self.nodes))
        _wait_for(f"{wanted} Kafka broker(s) answering", answers, timeout=timeout, log_path=first)

    def stop(self, grace: float = 20.0) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            _stop(process, grace)
        self.processes.clear()


def kafka_cluster(
    name: str,
    size: int = 1,
    *,
    advertised: dict[int, int] | None = None,
    ports: dict[int, int] | None = None,
    overrides: dict[str, str] | None = None,
) -> KafkaCluster:
    """Format and start `size` nodes (1 or 3) under var/`name`/; return once every broker answers.

    `advertised` maps a node id to the port its clients are told to use (a `TcpProxy` in front, which must be
    running already and forward to `ports[node_id]`).
    """
    root = in_var(name)
    shutil.rmtree(root, ignore_errors=True)
    nodes = [
        embedded_kafka.NodeSpec(
            node_id=node_id,
            port=(ports or {}).get(node_id) or free_port(),
            controller_port=free_port(),
            data_dir=root / f"data-{node_id}",
            advertised_port=(advertised or {}).get(node_id),
            overrides=overrides or {},
        )
        for node_id in range(1, size + 1)
    ]
    cluster = KafkaCluster(name, nodes)
    cluster.format()
    for node_id in cluster.nodes:
        cluster.start(node_id)
    try:
        cluster.wait_ready()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def kafka_behind_proxy(name: str = "test-kafka-proxied") -> Iterator[tuple[KafkaCluster, TcpProxy]]:
    """A fresh one-node Kafka whose every client connection (after bootstrap, too) goes through a `TcpProxy`."""
    port = free_port()
    proxy = TcpProxy(port)
    try:
        cluster = kafka_cluster(name, advertised={1: proxy.port}, ports={1: port})
        try:
            yield cluster, proxy
        finally:
            cluster.stop()
    finally:
        proxy.close()


# --------------------------------------------------------------------------
# A schema registry
# --------------------------------------------------------------------------


def start_schema_registry() -> embedded_registry.Registry:
    """A fresh Apicurio Registry (storage in memory) on a free port, once its Confluent API answers; its `url`
    is that API's. Output in var/test-schema-registry.log, rewritten at each start."""
    try:
        return embedded_registry.start(in_var("test-schema-registry", ".log"))
    except embedded.ServiceError as exc:
        pytest.fail(str(exc))
