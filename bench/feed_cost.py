"""CPU per event of one stream's subscription feeding records, by its options (docs/benchmarks.md).

A stream that shares the fan-out's writes costs its group's leader this once per group; a conflating stream
shares nothing and costs it itself, so at N such streams a record costs N times this on the event loop (delta
streams share when they sent the same: docs/data-plane.md, "Deltas").
No broker: 4 000 records of about 1 KiB, all with one key, fed two at a time as the fan-out feeds them.

    .venv/bin/python bench/feed_cost.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout holding bench/ is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
django.setup()

from streams.events.subscription import Subscription, SubscriptionOptions  # noqa: E402  (after django.setup())
from streams.kafka.client import Record  # noqa: E402

PARTITIONS = 4
RECORDS = [
    Record(
        n % PARTITIONS, n, b"hot", json.dumps({"t": n / 100, "p": n % PARTITIONS, "s": n, "x": "x" * 980}).encode(), ()
    )
    for n in range(4000)
]
OPTIONS = {
    "plain": SubscriptionOptions(),
    "key-form ids": SubscriptionOptions(key_form=True),
    "conflate_ms 500": SubscriptionOptions(conflate_ms=500),
    "deltas, first stream (computes the patches)": SubscriptionOptions(key_form=True, deltas=True),
    "deltas, every other stream (patches computed)": SubscriptionOptions(key_form=True, deltas=True),
}


def feed(options: SubscriptionOptions) -> float:
    """µs of CPU per record fed."""
    partitions = dict.fromkeys(range(PARTITIONS), 0)
    subscription = Subscription(dict.fromkeys(partitions, -2), ends=partitions, starts=partitions, options=options)
    started = time.process_time()
    for index in range(0, len(RECORDS), 2):
        subscription.feed(RECORDS[index : index + 2])
    return (time.process_time() - started) / len(RECORDS) * 1e6


def main() -> None:
    for record in RECORDS:
        _ = record.body  # encoded once, as the cache does for every stream
    print("| options | µs CPU per record |")
    print("|---|---:|")
    for name, options in OPTIONS.items():
        print(f"| {name} | {feed(options):.1f} |")


if __name__ == "__main__":
    main()
