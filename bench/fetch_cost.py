"""The fetch process's CPU per record, of several checkouts at once on one live topic.

    platform/with-services.sh -- .venv/bin/python bench/fetch_cost.py --checkouts before=/tmp/old,now=. \
        [--values avro] [--rate 100] [--seconds 60] [--rounds 3]

`bench/fanout.py` runs its servers one after another, and on a shared machine the fetch processes' CPU moves by
10 to 20 % from one minute to the next: more than the differences worth knowing. Here each checkout's live fetch
process (`python -m streams.kafka.fetch_process`, started as its worker starts it: the decoded topics' process
when the values are decoded) runs at the same time as the others, fed by a small driver of its own that assigns
the topic's partitions at their end, gives the models and takes every batch, on one topic that the bench's
producer writes at `--rate`. Every round prints each process's CPU (from /proc/PID/task/*/schedstat, in
nanoseconds) per record it sent, and its ratio to the first checkout's over the same seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness

ROOT = Path(__file__).resolve().parent.parent

# Run by each checkout's driver, with that checkout first on sys.path: the fetch process of that checkout, started
# as its worker starts it, fed like its worker feeds it. Prints "<pid>" once started, then "<records>" every
# second.
DRIVER = r"""
import os, socket, subprocess, sys, time
from multiprocessing.connection import Connection
from confluent_kafka import Consumer, TopicPartition
from config.kafka_settings import KafkaSettings
from streams.kafka.decoding import Models
from streams.codecs.schemas.spec import CatalogSpec, ModelSpec, TopicModels

bootstrap, topic, partitions, registry = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ours, theirs = socket.socketpair()
command = [sys.executable, "-m", "streams.kafka.fetch_process", str(theirs.fileno())]
fds = [theirs.fileno()]
if registry:
    try:
        from streams.kafka.decoder_process import Slot
    except ImportError:
        Slot = None
    if Slot is not None:  # decoded in a process of its own, which says in a shared slot what it decodes
        slot = os.memfd_create("bench-slot")
        os.ftruncate(slot, Slot.SIZE)
        command += ["decode", str(slot)]
        fds.append(slot)
process = subprocess.Popen(command, pass_fds=fds, stdin=subprocess.DEVNULL)
theirs.close()
conn = Connection(os.dup(ours.fileno()))
kafka = KafkaSettings(bootstrap_servers=bootstrap)
config = kafka.fetcher_config() if hasattr(kafka, "fetcher_config") else kafka.consumer_config()
conn.send(("config", config, 500))
if registry:
    catalog = CatalogSpec(name="bench", kind="schema-registry", url=registry)
    rule = TopicModels(topic_pattern=topic, value=ModelSpec(model="avro", catalog="bench", strategy="topic"))
    conn.send(("models", Models(catalogs=(catalog,), topics=(rule,))))
ends = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-fetch-cost"})
for partition in range(partitions):
    high = ends.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    conn.send(("assign", topic, partition, high, 1))
ends.close()
print(process.pid, flush=True)
records, said = 0, time.monotonic()
while process.poll() is None:
    if conn.poll(0.2):
        message = conn.recv()
        if message[0] == "batch":
            records += sum(len(found) for found in message[1].values())
            conn.send(("taken",))
    if time.monotonic() - said >= 1.0:
        said = time.monotonic()
        print(records, flush=True)
"""


class Driver:
    def __init__(self, label: str, checkout: Path, args: argparse.Namespace, topic: str, registry: str) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": str(checkout), "DJANGO_SETTINGS_MODULE": ""}
        self.process = subprocess.Popen(
            [sys.executable, "-c", DRIVER, args.bootstrap, topic, str(args.partitions), registry],
            cwd=checkout, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.lines = self.process.stdout
        self.fetch_pid = int(self.lines.readline())
        self.records = 0

    def sample(self) -> tuple[float, int]:
        """(CPU seconds of the fetch process, records it sent), now."""
        os.set_blocking(self.lines.fileno(), False)
        while line := self.lines.readline():
            self.records = int(line)
        return harness.process_cpu(self.fetch_pid), self.records

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def rounds(drivers: list[Driver], args: argparse.Namespace) -> None:
    """Print a row per round, and one for all: µs of CPU per record, and the ratios to the first checkout's."""
    labels = [driver.label for driver in drivers]
    ratios = [f"{label} ÷ {labels[0]}" for label in labels[1:]]
    print("| round | " + " | ".join(labels) + " | " + " | ".join(ratios) + " |")
    print("|---" * (2 * len(labels)) + "|")
    totals = [[0.0, 0] for _ in drivers]

    def row(name: str, costs: list[float]) -> None:
        ratios = [f"{cost / costs[0]:.3f}" for cost in costs[1:]]
        cells = [f"{cost:.0f}" for cost in costs] + ratios
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

    for round_ in range(1, args.rounds + 1):
        before = [driver.sample() for driver in drivers]
        time.sleep(args.seconds)
        after = [driver.sample() for driver in drivers]
        costs = []
        for index, ((cpu0, n0), (cpu1, n1)) in enumerate(zip(before, after, strict=True)):
            totals[index][0] += cpu1 - cpu0
            totals[index][1] += n1 - n0
            costs.append((cpu1 - cpu0) / max(1, n1 - n0) * 1e6)
        row(str(round_), costs)
    row("all", [cpu / max(1, n) * 1e6 for cpu, n in totals])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--checkouts", required=True, help="LABEL=DIR,...: the first is the reference")
    parser.add_argument("--values", choices=["json", "avro"], default="avro")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0, help="one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    args = parser.parse_args()
    checkouts = [item.split("=", 1) for item in args.checkouts.split(",")]
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%m%d%H%M%S")
    topic = f"bench-fetch-cost-{run_id}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    registry = harness.start_registry(out / f"fetch-cost-{run_id}-registry.log") if args.values == "avro" else None
    url = registry.url if registry is not None else ""
    command = [sys.executable, str(ROOT / "bench" / "producer.py"), "--bootstrap", args.bootstrap, "--topic", topic]
    command += ["--rate", str(args.rate), "--size", str(args.size), "--partitions", str(args.partitions)]
    producer = subprocess.Popen([*command, *(["--avro", url] if url else [])], stdout=subprocess.PIPE, text=True)
    drivers: list[Driver] = []
    try:
        assert producer.stdout is not None
        json.loads(producer.stdout.readline())  # ready: the schema is registered
        drivers = [Driver(label, Path(path).resolve(), args, topic, url) for label, path in checkouts]
        time.sleep(args.warmup)
        print(f"run {run_id}: {args.values} values, {args.rate:g} records/s over {args.partitions} partitions, "
              f"rounds of {args.seconds:g} s; µs of the fetch process's CPU per record it sent")  # fmt: skip
        rounds(drivers, args)
    finally:
        for driver in drivers:
            driver.stop()
        producer.terminate()
        producer.wait(10)
        if registry is not None:
            registry.stop()
        admin.delete_topics([topic])


if __name__ == "__main__":
    main()
