"""What a group-less confluent-kafka consumer does when a topic it fetches is deleted (and recreated).

Run by hand, against an Apache Kafka of its own (default) or any broker::

    .venv/bin/python -X faulthandler bench/topic_deletion.py                  # every scenario, own broker
    .venv/bin/python -X faulthandler bench/topic_deletion.py --bootstrap H:P  # against another broker
    .venv/bin/python -X faulthandler bench/topic_deletion.py --only unassign  # one scenario

The consumer is set up as the fetcher sets up its own (streams/kafka/fetcher.py): no group, `incremental_assign()` at
explicit offsets, `enable.partition.eof`, `fetch.wait.max.ms` 20, polled from a thread, with
`get_watermark_offsets(cached=True)` every second. A second topic is assigned beside the deleted one and
produced to throughout, to see whether the consumer keeps fetching it. Each scenario runs in a child process of
its own, so one that crashes (a signal) is reported and the next still runs. After the deletion the scenario
makes one more call (its name) and keeps polling for a few seconds. The output lists, per scenario: how the
process ended (exit code or signal), the errors the consumer reported for the deleted topic, and whether the
other topic's records all arrived in order. `--gdb` runs each child under gdb for a native backtrace of a crash;
`--wire` puts a recorder in front of the script's broker and prints each Fetch answer carrying a partition error.

What it showed on the in-memory broker the project embedded then (librdkafka 2.16.0; docs/decisions/0008-topic-
deletion.md): every scenario ends with SIGSEGV, on the first fetch answer after the deletion, before any call of the
scenario's own, except with the topic's partitions paused (not fetched): then at the first fetch after `resume()`.
The crash is on librdkafka's main thread: rd_kafka_metadata_update_op -> rd_kafka_metadata_cache_find -> strcmp.
that broker answers the Fetch (v16, by topic id) of a deleted topic with topic id 0, UNKNOWN_TOPIC_OR_PARTITION, a
CurrentLeader tag and the NodeEndpoints tag; librdkafka turns that into a metadata update for a topic with neither
an id nor a name, and looks the missing name up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
    libversion,
)
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.append(str(Path(__file__).resolve().parent.parent / "platform"))
import embedded_kafka

SCENARIOS = {
    "poll": "only keep polling across the deletion",
    "unassign": "incremental_unassign() the deleted topic's partitions after the deletion",
    "resume_unassign": "pause, then (after the deletion) resume and incremental_unassign(), as the fetcher does",
    "list_topics": "list_topics(topic) of the deleted topic (what the fetcher's assign() does)",
    "pause_resume": "pause() and resume() the deleted topic's partitions",
    "watermarks": "get_watermark_offsets(cached=True) of the deleted partitions, every second",
    "close": "close() the consumer while the deleted topic is assigned",
    "recreate": "recreate the topic under the same name, produce to it, keep polling",
    "recreate_reassign": "unassign, recreate under the same name, assign at 0 again, produce, poll",
}
PARTITIONS = 2
SETTLE_S = 6.0  # how long each scenario polls after the deletion (librdkafka's metadata refresh is ~1-5 s)


# --- the broker ------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_broker(workdir: Path, port: int, advertised: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """An Apache Kafka node of the script's own on `port`, advertising `advertised` (a `WireRecorder`) if given."""
    node = embedded_kafka.NodeSpec(
        node_id=1, port=port, controller_port=free_port(), data_dir=workdir / "data", advertised_port=advertised
    )
    embedded_kafka.write_properties(node, [node])
    embedded_kafka.format_storage(node, embedded_kafka.new_cluster_id())
    process = embedded_kafka.spawn(node, workdir / "kafka.log")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if embedded_kafka.metadata_ready(node.bootstrap):
            return process, node.bootstrap
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"Kafka did not answer within 90 s; see {workdir / 'kafka.log'}")


# --- what the broker answers: Fetch v12+ on the wire -------------------------------------------------------------


class Reader:
    """Just enough of the Kafka protocol's flexible encoding to read a Fetch request and response."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        out = self.data[self.at : self.at + size]
        self.at += size
        return out

    def signed(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big", signed=True)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def tags(self) -> dict[int, Reader]:
        found = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            found[tag] = Reader(self.take(size))
        return found

    def array(self) -> int:
        return self.uvarint() - 1  # compact: length + 1, 0 for null


def fetch_request_topics(body: Reader) -> list[str]:
    body.take(4 + 4 + 4 + 1 + 4 + 4)  # max wait, min bytes, max bytes, isolation, session id and epoch
    topics = []
    for _ in range(body.array()):
        topics.append(body.take(16).hex())
        for _ in range(body.array()):
            body.take(4 + 4 + 8 + 4 + 8 + 4)
            body.tags()
        body.tags()
    return topics


def fetch_response(body: Reader) -> dict[str, Any]:
    """The partitions answered with an error, with their topic id and CurrentLeader tag; the NodeEndpoints tag."""
    body.take(4)
    answer: dict[str, Any] = {"error": body.signed(2), "session": body.signed(4), "errors": []}
    for _ in range(body.array()):
        topic_id = body.take(16).hex()
        for _ in range(body.array()):
            partition, error = body.signed(4), body.signed(2)
            body.take(8 + 8 + 8)
            for _ in range(max(0, body.array())):
                body.take(16)
                body.tags()
            body.take(4)
            body.take(max(0, body.uvarint() - 1))
            tags = body.tags()
            if error:
                leader = tags.get(1)
                answer["errors"].append({
                    "topic_id": topic_id, "partition": partition, "error": error,
                    "current_leader": (leader.signed(4), leader.signed(4)) if leader else None,
                })  # fmt: skip
        body.tags()
    answer["node_endpoints_tag"] = 0 in body.tags()
    return answer


class WireRecorder:
    """A TCP proxy in front of the broker that prints each Fetch answer carrying a partition error."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.requests: dict[int, tuple[int, int, list[str]]] = {}  # correlation id: api key, version, topic ids
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the broker is still starting
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream, self._request), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self._response), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, frame: Any) -> None:
        buffer = b""
        with contextlib.suppress(OSError), sink:  # either side closing ends the link
            while data := source.recv(65536):
                sink.sendall(data)
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + (size := int.from_bytes(buffer[:4], "big")):
                    frame(Reader(buffer[4 : 4 + size]))
                    buffer = buffer[4 + size :]

    def _request(self, frame: Reader) -> None:
        key, version, correlation = frame.signed(2), frame.signed(2), frame.signed(4)
        topics: list[str] = []
        if key == 1 and version >= 12:
            frame.take(max(0, frame.signed(2)))  # client id (a plain nullable string, even in flexible headers)
            frame.tags()
            topics = fetch_request_topics(frame)
        self.requests[correlation] = (key, version, topics)

    def _response(self, frame: Reader) -> None:
        correlation = frame.signed(4)
        key, version, asked = self.requests.pop(correlation, (-1, -1, []))
        if key != 1 or version < 12:
            return
        frame.tags()
        answer = fetch_response(frame)
        if answer["errors"]:
            say(wire=f"FetchResponse v{version}", asked_topic_ids=sorted(set(asked)), **answer)


# --- one scenario, in a child process ----------------------------------------------------------------------------


def create(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        described = admin.list_topics(topic, timeout=5).topics.get(topic)
        if described is not None and described.error is None and len(described.partitions) == PARTITIONS:
            return
        time.sleep(0.1)


def say(**what: Any) -> None:
    print(json.dumps(what), flush=True)


class Poller:
    """Polls as the fetcher does, from a thread; commands run on that thread between polls."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "topic-deletion-nogroup",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 20,
                "enable.partition.eof": True,
                "log_level": 7 if os.environ.get("RDKAFKA_DEBUG") else 3,
                **({"debug": os.environ["RDKAFKA_DEBUG"]} if os.environ.get("RDKAFKA_DEBUG") else {}),
            }
        )
        self.received: dict[str, list[tuple[int, int]]] = {}
        self.errors: dict[str, set[str]] = {}
        self.highs: dict[tuple[str, int], int] = {}
        self.assigned: list[TopicPartition] = []
        self._commands: list[Any] = []
        self._lock = threading.Lock()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def run(self, what: Any) -> Any:
        """Run `what(consumer)` on the polling thread; wait for its result."""
        done = threading.Event()
        out: list[Any] = []

        def command() -> None:
            try:
                out.append(what(self.consumer))
            except Exception as exc:  # reported, as the fetcher logs a failed command
                out.append(exc)
            done.set()

        with self._lock:
            self._commands.append(command)
        done.wait(30)
        return out[0] if out else "no answer in 30 s"

    def stop(self) -> None:
        self._running = False
        self._thread.join(10)

    def _run(self) -> None:
        highs_due = 0.0
        while self._running:
            with self._lock:
                commands, self._commands = self._commands, []
            for command in commands:
                command()
            message = self.consumer.poll(0.05)
            for m in [message] if message is not None else []:
                error = m.error()
                if error is None:
                    self.received.setdefault(m.topic() or "", []).append((m.partition() or 0, m.offset() or 0))
                elif error.code() != KafkaError._PARTITION_EOF:
                    self.errors.setdefault(m.topic() or "?", set()).add(error.name())
            if time.monotonic() > highs_due:
                highs_due = time.monotonic() + 1
                for tp in list(self.assigned):
                    try:
                        self.highs[(tp.topic, tp.partition)] = self.consumer.get_watermark_offsets(tp, cached=True)[1]
                    except KafkaException as exc:
                        self.errors.setdefault(tp.topic, set()).add(f"watermarks: {exc.args[0].name()}")


class Run:
    """One scenario: a topic to delete and another beside it, both assigned and polled."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.doomed, self.other = f"doomed-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
        self.doomed_tps = [TopicPartition(self.doomed, p) for p in range(PARTITIONS)]
        self.sent = 0  # records produced to the other topic
        self.poller = Poller(bootstrap)

    def say(self, step: str, **what: Any) -> None:
        say(scenario=self.name, step=step, **what)

    def call(self, step: str, what: Any) -> None:
        """Run `what(consumer)` on the polling thread and report its result."""
        self.say(step, result=repr(self.poller.run(what)))

    def produce_other(self, rounds: int) -> None:
        for _ in range(rounds):
            for p in range(PARTITIONS):
                self.producer.produce(self.other, b"x", partition=p)
                self.sent += 1
        self.producer.flush(10)

    def set_up(self) -> None:
        for topic in (self.doomed, self.other):
            create(self.admin, topic)
            for p in range(PARTITIONS):
                for i in range(3):
                    self.producer.produce(topic, b"before %d" % i, partition=p)
        self.producer.flush(10)
        self.sent = 3 * PARTITIONS
        poller = self.poller
        poller.start()
        tps = [TopicPartition(t, p, 0) for t in (self.doomed, self.other) for p in range(PARTITIONS)]
        poller.run(lambda c: [c.list_topics(t, timeout=5) for t in (self.doomed, self.other)])
        poller.run(lambda c: c.incremental_assign(tps))
        poller.assigned = [TopicPartition(t.topic, t.partition) for t in tps]
        time.sleep(1.5)
        described = self.admin.describe_topics(TopicCollection([self.doomed, self.other]))
        ids = {t: str(f.result(10).topic_id) for t, f in described.items()}
        self.say("assigned", received={t: len(v) for t, v in poller.received.items()}, topic_ids=ids)

    def delete(self) -> None:
        if self.name == "resume_unassign":
            self.poller.run(lambda c: c.pause(self.doomed_tps))
        self.produce_other(2)
        try:
            self.admin.delete_topics([self.doomed])[self.doomed].result(10)
            self.say("deleted", topic=self.doomed)
        except KafkaException as exc:
            self.say("delete failed", error=str(exc))
        self.produce_other(2)
        time.sleep(2.0)  # polling across the deletion
        self.say("polled across the deletion", errors={t: sorted(e) for t, e in self.poller.errors.items()})

    def after(self) -> None:
        """The scenario's own call(s) after the deletion."""
        name, poller, tps = self.name, self.poller, self.doomed_tps
        if name == "resume_unassign":
            self.call("resume", lambda c: c.resume(tps))
        if name in ("unassign", "resume_unassign", "recreate_reassign"):
            self.call("incremental_unassign", lambda c: c.incremental_unassign(tps))
            poller.assigned = [tp for tp in poller.assigned if tp.topic != self.doomed]
        elif name == "list_topics":
            found = poller.run(lambda c: c.list_topics(self.doomed, timeout=5))
            meta = found.topics.get(self.doomed) if not isinstance(found, Exception) else found
            self.say("list_topics", result=repr(getattr(meta, "error", meta)))
        elif name == "pause_resume":
            self.call("pause", lambda c: c.pause(tps))
            self.call("resume", lambda c: c.resume(tps))
        if name.startswith("recreate"):
            create(self.admin, self.doomed)
            self.say("recreated")
            if name == "recreate_reassign":
                again = [TopicPartition(self.doomed, p, 0) for p in range(PARTITIONS)]
                self.call("assign again", lambda c: c.incremental_assign(again))
                poller.assigned += tps
            poller.received.pop(self.doomed, None)
            for p in range(PARTITIONS):
                self.producer.produce(self.doomed, b"after", partition=p)
            self.producer.flush(10)

    def end(self) -> None:
        poller = self.poller
        self.produce_other(2)
        time.sleep(SETTLE_S)
        got = poller.received.get(self.other, [])
        offsets = {p: [o for q, o in got if q == p] for p in range(PARTITIONS)}
        self.say(
            "end",
            other_received=len(got),
            other_sent=self.sent,
            other_in_order=all(found == list(range(len(found))) for found in offsets.values()),
            deleted_topic_after=poller.received.get(self.doomed, []) if self.name.startswith("recreate") else None,
            errors={t: sorted(e) for t, e in poller.errors.items()},
            highs={f"{t}/{p}": h for (t, p), h in poller.highs.items() if t == self.doomed},
        )
        poller.stop()
        poller.consumer.close()
        self.say("closed")


def scenario(name: str, bootstrap: str) -> None:
    run = Run(name, bootstrap)
    run.set_up()
    run.delete()
    if name == "close":
        run.poller.stop()
        run.poller.consumer.close()
        run.say("closed", other=len(run.poller.received.get(run.other, [])), sent=run.sent)
        return
    run.after()
    run.end()


# --- the driver ---------------------------------------------------------------------------------------------------


def run_child(name: str, bootstrap: str, use_gdb: bool) -> None:
    command = [sys.executable, "-X", "faulthandler", __file__, "--child", name, "--bootstrap", bootstrap]
    if use_gdb:
        gdb = shutil.which("gdb")
        if gdb is None:
            raise SystemExit("--gdb: gdb is not installed")
        command = [gdb, "-q", "-batch", "-ex", "run", "-ex", "bt 25", "-ex", "info threads", "--args", *command]
    print(f"\n== {name}: {SCENARIOS[name]}", flush=True)
    child = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    for line in child.stdout.splitlines():
        if line.startswith("{") or use_gdb:
            print("  " + line)
    crashed = [line for line in child.stderr.splitlines() if "Fatal Python error" in line or "File " in line]
    if child.returncode < 0:
        print(f"  -> killed by signal {signal.Signals(-child.returncode).name}")
        if crashed:
            print("  " + "\n  ".join(crashed[:20]))
        elif not use_gdb:
            print("  (faulthandler printed nothing: the crash is on a thread of librdkafka's; --gdb shows it)")
    else:
        print(f"  -> exit code {child.returncode}")
        if child.returncode:
            print("  " + "\n  ".join(child.stderr.splitlines()[-15:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a broker to use instead of a fresh Apache Kafka of its own")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--gdb", action="store_true", help="run each scenario under gdb (native backtrace)")
    parser.add_argument("--wire", action="store_true", help="print the broker's Fetch answers that carry an error")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        scenario(args.child, args.bootstrap)
        return
    print(f"librdkafka {libversion()[0]}, python {sys.version.split()[0]}")
    broker = None
    workdir = Path(tempfile.mkdtemp(prefix="topic-deletion-"))
    bootstrap = args.bootstrap
    if args.wire and bootstrap is not None:
        raise SystemExit("--wire needs the script's own broker (it advertises the recorder's address)")
    if bootstrap is None:
        port = free_port()
        advertised = WireRecorder(port).port if args.wire else None
        broker, bootstrap = start_broker(workdir, port, advertised)
        print(f"Apache Kafka at {bootstrap}, log {workdir / 'kafka.log'}")
    try:
        for name in args.only or SCENARIOS:
            run_child(name, bootstrap, args.gdb)
    finally:
        if broker is not None:
            broker.send_signal(signal.SIGTERM)
            broker.wait(30)
    if not os.environ.get("KEEP"):
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
