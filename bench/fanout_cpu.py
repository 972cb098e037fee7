"""The fan-out's CPU per stream and batch, in one process, with nothing else on the event loop.

`bench/fanout.py` measures what clients see over real sockets, where latency near saturation moves a lot with
a few per cent of CPU and the load generator shares the machine. This one isolates the part the platform owns:
a real hub, fetcher, cache and broker, N streams parked at the live end on fake connections (as the in-process
tests open them), and records produced one at a time, each its own batch. It reports the event loop thread's CPU
per stream per batch (µs), which is what each extra call in the hot path costs, with little noise.

    .venv/bin/python bench/fanout_cpu.py                                # this checkout
    .venv/bin/python bench/fanout_cpu.py --app-dir DIR --app-dir .      # alternating, one table

Needs KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL (run it under platform/with-services.sh, or with `make
services-up` running). Each round runs in a child process of its own, from its checkout's directory.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import django
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent


def child(streams: int, batches: int) -> dict[str, float]:
    """Run in the checkout's directory: open `streams` streams, deliver `batches` records, measure."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    django.setup()
    try:
        inprocess = importlib.import_module("tests.support.inprocess")
    except ImportError:  # a checkout from before the tests' support package
        inprocess = importlib.import_module("tests.inprocess")
    wait_until = functools.partial(importlib.import_module("tests.conftest").wait_until, interval=0.002)

    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = f"bench-fanout-cpu-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    loop_thread = inprocess.LoopThread()
    try:
        hub = loop_thread.run(_new_hub(inprocess, loop_thread.loop))
        opened = [loop_thread.run(inprocess.open_stream(hub, topic, start="live")) for _ in range(streams)]
        producer.produce(topic, _record(0))  # a first record, so every stream stands at the live end
        producer.flush(30)
        wait_until(lambda: all(_last_seen(s) >= 0 for s in opened), 60)
        cpu_before = loop_thread.run(_thread_cpu())
        wall = time.perf_counter()
        for n in range(1, batches + 1):
            producer.produce(topic, _record(n))
            producer.flush(30)
            wait_until(functools.partial(_reached, opened[-1], n), 30)
        wait_until(lambda: all(_last_seen(s) >= batches for s in opened), 60)
        cpu = loop_thread.run(_thread_cpu()) - cpu_before
        wall = time.perf_counter() - wall
        for s in opened:
            loop_thread.run(inprocess.close_stream(s))
        loop_thread.run(hub.stop())
    finally:
        loop_thread.close()
        admin.delete_topics([topic])
    return {"us_per_stream_batch": cpu / (streams * batches) * 1e6, "loop_cpu_s": cpu, "wall_s": wall}


async def _new_hub(inprocess: Any, loop: Any) -> Any:
    hub = inprocess.new_hub(loop, coalesce_s=0.0)
    hub.start()
    return hub


async def _thread_cpu() -> float:
    return time.thread_time()


def _record(n: int) -> bytes:
    """Record `n`: about 200 bytes of JSON, its number first (`_last_seen` reads it back)."""
    return json.dumps({"n": n, "pad": "x" * 200}).encode()


def _last_seen(stream: Any) -> int:
    """The last record's number the stream got (read from the tail of what was written: cheap, as this runs
    beside the loop and holds the GIL while it looks)."""
    tail = bytes(stream.flow.data[-400:])
    start = tail.rfind(b'{"n": ')
    return int(tail[start + 6 : tail.index(b",", start)]) if start >= 0 else -1


def _reached(stream: Any, n: int) -> bool:
    return _last_seen(stream) >= n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--app-dir", action="append", default=[], help="a checkout to measure (repeat to alternate)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.streams, args.batches)))
        return
    apps = [Path(a).resolve() for a in args.app_dir] or [REPO]
    results: dict[Path, list[dict[str, float]]] = {app: [] for app in apps}
    for _ in range(args.rounds):
        for app in apps:
            command = [sys.executable, str(Path(__file__).resolve()), "--child"]
            command += ["--streams", str(args.streams), "--batches", str(args.batches)]
            env = {**os.environ, "PYTHONPATH": str(app)}
            out = subprocess.run(command, cwd=app, env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                sys.exit(f"{app}: the round failed:\n{out.stderr[-3000:]}")
            results[app].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"\n{args.streams} streams, {args.batches} batches of one record, {args.rounds} rounds (alternating)\n")
    print("| checkout | µs of loop CPU per stream and batch, each round | median | least |")
    print("|---|---|---|---|")
    for app, rounds in results.items():
        figures = [r["us_per_stream_batch"] for r in rounds]
        each = ", ".join(f"{f:.2f}" for f in figures)
        print(f"| {app.name or app} | {each} | {statistics.median(figures):.2f} | {min(figures):.2f} |")


if __name__ == "__main__":
    main()
