"""Send one JSON message per second to the demo topic, and one Avro order to the demo's Avro topic, until stopped."""

from __future__ import annotations

import json
import random
import signal
import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from streams.management import demo_orders

ITEMS = ("apple", "pear", "plum", "fig", "kiwi")


class Command(BaseCommand):
    help = (
        "Produce a JSON item snapshot to the demo topic and an Avro order to the Avro topic every second "
        "(Ctrl-C or SIGTERM stops it)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--topic", default="items-snapshots")
        parser.add_argument("--avro-topic", default="orders-avro", help="The Avro topic ('' = none).")
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--count", type=int, default=0, help="Stop after this many messages (0 = never).")

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        producer = Producer(settings.KAFKA.producer_config())
        sequence = 0
        while not stopping and (options["count"] == 0 or sequence < options["count"]):
            sequence += 1
            item = random.choice(ITEMS)  # noqa: S311
            value = {
                "seq": sequence,
                "item": item,
                "price": round(random.uniform(0.5, 5.0), 2),  # noqa: S311
                "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            }
            producer.produce(options["topic"], key=item.encode(), value=json.dumps(value).encode())
            if options["avro_topic"]:
                order = demo_orders.order(sequence)
                producer.produce(options["avro_topic"], key=order["id"].encode(), value=demo_orders.encode(order))
            producer.poll(0)
            time.sleep(options["interval"])
        producer.flush(5)
