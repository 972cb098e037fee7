"""The producer of the fan-out benchmark: JSON messages of a fixed size at a fixed rate, each with its send time.

Run by `bench/fanout.py` as a subprocess::

    .venv/bin/python bench/producer.py --bootstrap HOST:PORT --topic T --rate 100 [--count N]

Each message is ``{"t":<time.time() at produce>,"p":<partition>,"s":<sequence in partition>,"pad":"xx..."}``,
padded to ``--size`` bytes, sent round-robin over ``--partitions`` partitions with the Kafka timestamp set to
the same send time, each with the key ``--key`` if given. With ``--avro REGISTRY_URL``, the same fields are
written as Avro by confluent-kafka's AvroSerializer against that registry (subject ``<topic>-value``): a server
decoding the topic serves the same JSON.
It prints ``{"ready": true}`` once the first message is acknowledged, and on exit (SIGTERM, SIGINT, or ``--count``
messages sent) ``{"produced": n, "acked": n, "errors": n}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Tick",
        "namespace": "bench",
        "fields": [
            {"name": "t", "type": "double"},
            {"name": "p", "type": "int"},
            {"name": "s", "type": "long"},
            {"name": "pad", "type": "string"},
        ],
    }
)


def message(sent: float, partition: int, seq: int, size: int) -> bytes:
    head = '{"t":%.6f,"p":%d,"s":%d,"pad":"' % (sent, partition, seq)  # noqa: UP031
    return (head + "x" * max(0, size - len(head) - 2) + '"}').encode()


def avro_writer(registry: str, topic: str) -> Callable[[float, int, int, int], bytes]:
    """`message`'s fields as Avro, framed for `registry` (the padding keeps the JSON a server serves this size)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415  (only with --avro)
    from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: PLC0415
    from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: PLC0415

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry}), AVRO_SCHEMA)
    context = SerializationContext(topic, MessageField.VALUE)

    def write(sent: float, partition: int, seq: int, size: int) -> bytes:
        head = len('{"t":%.6f,"p":%d,"s":%d,"pad":"' % (sent, partition, seq))  # noqa: UP031
        value = {"t": sent, "p": partition, "s": seq, "pad": "x" * max(0, size - head - 2)}
        framed: bytes = serializer(value, context)
        return framed

    return write


def paced(producer: Producer, args: argparse.Namespace, on_delivery: Any, stopping: Callable[[], bool]) -> int:
    """Produce at `args.rate` until stopped (or `args.count` sent); returns how many were sent."""
    sequences = [0] * args.partitions
    encode = avro_writer(args.avro, args.topic) if args.avro else message
    key = args.key.encode() or None  # one key for all: a hot key, as conflation benchmarks want
    sent = 0
    started = time.monotonic()
    while not stopping() and (args.count == 0 or sent < args.count):
        due = int((time.monotonic() - started) * args.rate) + 1
        if args.count:
            due = min(due, args.count)
        while sent < due and not stopping():
            partition = sent % args.partitions
            now = time.time()
            value = encode(now, partition, sequences[partition], args.size)
            try:
                producer.produce(
                    args.topic, value, key=key, partition=partition, timestamp=int(now * 1000), on_delivery=on_delivery
                )
            except BufferError:
                producer.poll(0.01)
                continue
            sequences[partition] += 1
            sent += 1
        producer.poll(0)
        next_at = started + sent / args.rate
        time.sleep(max(0.0, min(0.1, next_at - time.monotonic())))
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, required=True, help="messages per second (> 0)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--count", type=int, default=0, help="stop after this many messages (0: until stopped)")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--avro", metavar="REGISTRY_URL", help="write Avro values through this schema registry")
    parser.add_argument("--key", default="", help="every message's key (default: none)")
    args = parser.parse_args()

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    acked = errors = 0
    ready = False

    def delivered(err: KafkaError | None, msg: Message) -> None:
        nonlocal acked, errors, ready
        if err is not None:
            errors += 1
            return
        acked += 1
        if not ready:
            ready = True
            print(json.dumps({"ready": True}), flush=True)

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": "bench-producer",
        "linger.ms": args.linger_ms,
        "queue.buffering.max.messages": 1_000_000,
    }
    producer = Producer(config)
    sent = paced(producer, args, delivered, lambda: stopping)
    producer.flush(10)
    print(json.dumps({"produced": sent, "acked": acked, "errors": errors}), flush=True)
    sys.exit(0 if errors == 0 else 1)


if __name__ == "__main__":
    main()
