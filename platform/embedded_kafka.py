"""Apache Kafka as the embedded broker: one KRaft node (broker and controller in one JVM) under var/kafka/.

The jars come from Maven Central through `platform/kafka/pom.xml`; `platform/install.sh` copies them once into
`jar_dir()`, a cache outside the checkout named after the pom's hash (config/jar_cache.py). Storage is formatted
on first start and kept under `var/kafka/data/`, so topics and records survive a restart of `make run`.

The pieces that make one node (`NodeSpec`, `server_properties`, `format_storage`, `spawn`, `metadata_ready`) are
also what the tests use to start brokers of their own, up to a three-node cluster.

Run as a script, ``embedded_kafka.py jar-dir`` prints where the jars belong (for install.sh).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from embedded import (
    HOST,
    ROOT,
    PidfileService,
    ServiceError,
    log,
    pick_port,
    read_int,
    run,
    tcp_answers,
    wait_ready,
    write_text,
)

from config.jar_cache import pom_dir

POM = ROOT / "platform" / "kafka" / "pom.xml"
LOG4J = ROOT / "platform" / "kafka" / "log4j2.properties"

# A small heap: the broker of a development machine holds a few topics. SerialGC and C1 only start fastest and
# keep the JVM near 200 MB resident; the cleaner's dedupe buffer would otherwise take 128 MiB of the heap.
JVM_FLAGS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

# Housekeeping that shows in seconds (retention, deletion, compaction): the defaults wait 30 s to 5 min.
BROKER_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "log.cleaner.dedupe.buffer.size": str(4 * 1024 * 1024),
    "log.cleaner.backoff.ms": "200",
    "log.initial.task.delay.ms": "100",
    "log.retention.check.interval.ms": "500",
    "log.segment.delete.delay.ms": "500",
    "file.delete.delay.ms": "500",
    "message.max.bytes": str(8 * 1024 * 1024 + 1024),
}


def jar_dir() -> Path:
    """Where install.sh copies the jars of the pom as it is now."""
    return pom_dir("kafka", POM)


def classpath() -> str:
    """The java class path of the installed jars; a clear error when install.sh has not run."""
    jars = jar_dir()
    if not (jars / ".complete").exists():
        raise ServiceError(f"Apache Kafka's jars are not in {jars}: run platform/install.sh")
    return f"{jars}/*"


def java() -> str:
    """The java binary: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ServiceError("java not found: run platform/install.sh")
    return found


def java_command(main: str, *args: str, heap: Sequence[str] = JVM_FLAGS) -> list[str]:
    """``java <flags> -cp <jars> main args...`` with the project's log4j2 configuration."""
    return [java(), *heap, f"-Dlog4j2.configurationFile={LOG4J}", "-cp", classpath(), main, *args]


def new_cluster_id() -> str:
    """A Kafka cluster id: URL-safe base64 of 16 random bytes, unpadded, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class NodeSpec:
    """One KRaft node (broker and controller) on 127.0.0.1."""

    node_id: int
    port: int
    controller_port: int
    data_dir: Path
    advertised_port: int | None = None  # what clients are told to connect to (a proxy in front), else `port`
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.advertised_port or self.port}"

    @property
    def voter(self) -> str:
        return f"{self.node_id}@{HOST}:{self.controller_port}"

    @property
    def properties_file(self) -> Path:
        return self.data_dir.parent / f"server-{self.node_id}.properties"


def server_properties(node: NodeSpec, voters: Sequence[NodeSpec]) -> str:
    """The server.properties of `node` in a cluster whose controllers are `voters` (itself included)."""
    replicas = str(min(3, len(voters)))
    min_isr = str(min(2, len(voters)))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(v.voter for v in voters),
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.advertised_port or node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.data_dir),
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        **BROKER_DEFAULTS,
        **node.overrides,
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


def write_properties(node: NodeSpec, voters: Sequence[NodeSpec]) -> Path:
    node.data_dir.parent.mkdir(parents=True, exist_ok=True)
    write_text(node.properties_file, server_properties(node, voters))
    return node.properties_file


def format_storage(node: NodeSpec, cluster_id: str) -> None:
    """Format `node.data_dir` for `cluster_id` unless it holds a formatted log already (then keep its data)."""
    if (node.data_dir / "meta.properties").exists():
        return
    node.data_dir.mkdir(parents=True, exist_ok=True)
    cmd = java_command("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.properties_file))
    run(cmd, f"formatting Kafka storage in {node.data_dir}")


def spawn(node: NodeSpec, logfile: Path) -> subprocess.Popen[bytes]:
    """Start the node's JVM in a session of its own, its output in `logfile`; return at once."""
    with logfile.open("ab") as out:
        return subprocess.Popen(
            java_command("kafka.Kafka", str(node.properties_file)),
            cwd=node.data_dir.parent,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def metadata_ready(bootstrap: str, brokers: int = 1, timeout: float = 2.0) -> bool:
    """Whether a metadata request names at least `brokers` brokers (a port that accepts is not enough)."""
    from confluent_kafka import KafkaException  # noqa: PLC0415  (install.sh runs this file for `jar-dir`)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    host, _, port = bootstrap.split(",", maxsplit=1)[0].rpartition(":")
    if host == HOST and not tcp_answers(int(port)):
        return False
    # log_level 0: keep librdkafka's connection-refused chatter off stderr.
    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = client.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return len(metadata.brokers) >= brokers


class Kafka(PidfileService):
    """The embedded Apache Kafka: one KRaft node, its data kept under var/kafka/data across restarts."""

    name = "kafka"
    env_key = "KAFKA_BOOTSTRAP_SERVERS"
    stop_grace = 20.0  # a controlled shutdown flushes and closes the logs; then SIGKILL

    @property
    def marker(self) -> str:  # type: ignore[override]
        """Only a JVM started with this checkout's properties file is ours."""
        return str(self.dir / "server-1.properties")

    @property
    def pidfile(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "kafka.log"

    def url(self, port: int) -> str:
        """The bootstrap servers string."""
        return f"{HOST}:{port}"

    def answers(self, port: int) -> bool:
        """Whether a metadata request names the broker."""
        return metadata_ready(self.url(port))

    def node(self, port: int, controller_port: int) -> NodeSpec:
        return NodeSpec(node_id=1, port=port, controller_port=controller_port, data_dir=self.dir / "data")

    def start(self) -> int:
        """Format storage on first use, then start the node on a free port and wait for its metadata."""
        self.dir.mkdir(parents=True, exist_ok=True)
        port = pick_port(read_int(self.portfile))
        controller_file = self.dir / "controller-port"
        controller_port = pick_port(read_int(controller_file))
        while controller_port == port:
            controller_port = pick_port(None)
        node = self.node(port, controller_port)
        write_properties(node, [node])
        cluster_file = self.dir / "cluster-id"
        cluster_id = cluster_file.read_text().strip() if cluster_file.exists() else new_cluster_id()
        format_storage(node, cluster_id)
        write_text(cluster_file, f"{cluster_id}\n")
        log(f"kafka: starting Apache Kafka on port {port} (data in {node.data_dir})")
        proc = spawn(node, self.logfile)
        write_text(self.pidfile, f"{proc.pid}\n")
        write_text(self.portfile, f"{port}\n")
        write_text(controller_file, f"{controller_port}\n")
        wait_ready("kafka", lambda: self.answers(port), lambda: proc.poll() is None, self.logfile, timeout=90.0)
        return port


if __name__ == "__main__":
    if sys.argv[1:] == ["jar-dir"]:
        print(jar_dir())
        sys.exit(0)
    print("usage: embedded_kafka.py jar-dir", file=sys.stderr)
    sys.exit(2)
