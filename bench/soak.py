"""Soak: clients connecting and leaving at random for minutes; does each web worker's memory come back after?

    platform/with-services.sh -- .venv/bin/python bench/soak.py [--quick] [--minutes 10] [--clients 2000]

See bench/README.md. In short: one fresh topic (4 partitions) and a `live` route to it, platform/web.py with
2 workers (as `make run` starts them), the producer at a steady rate (1 KiB messages carrying their partition and
sequence number) and the load generator. A warm-up (a few clients churning) loads what a worker loads on its first
streams; after a settle time, the baseline. Then `--clients` clients connect and leave at random for `--minutes`,
half of the reconnections resuming with their Last-Event-ID; then they all leave, and after the same settle time,
the end. Each worker's RSS and open file descriptors are read from /proc every `--sample` seconds throughout. The
table: per worker, baseline, peak, end and end against baseline, and whether both came back within `--tolerance`.
The load generator checks every stream's sequence numbers: no event lost or delivered twice, resumes included.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: bench/ is on sys.path, the checkout holding it is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.harness import BenchError, Interrupted, Proc, Scenario, fd_count, fmt_errors, log, rss_mb

DEFAULT_IDLE_S = 60  # SSE_TOPIC_IDLE_S's default: a topic nobody reads is dropped from the cache after it
END_SAMPLES = 3  # baseline and end: the median of the last samples of their settle time


@dataclass
class Sample:
    at: float  # seconds since the server started
    phase: str
    workers: dict[int, tuple[float | None, int | None]]  # pid -> (RSS MB, open fds)


@dataclass
class Samples:
    """Every worker's RSS and descriptors, read from /proc every `interval` s by a thread until stopped."""

    sc: Scenario
    interval: float
    phase: str = "start-up"
    taken: list[Sample] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def take(self) -> Sample:
        pids = self.sc.server_pids()
        sample = Sample(
            time.monotonic() - self.started, self.phase, {pid: (rss_mb(pid), fd_count(pid)) for pid in pids}
        )
        self.taken.append(sample)
        return sample

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self.take()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)

    def of(self, phase: str) -> list[Sample]:
        return [s for s in self.taken if s.phase == phase]


@dataclass
class WorkerRow:
    pid: int
    rss: tuple[float | None, float | None, float | None]  # baseline, peak, end
    fds: tuple[float | None, float | None, float | None]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def settled_value(samples: list[Sample], pid: int, index: int) -> float | None:
    values = [v for s in samples[-END_SAMPLES:] if (v := s.workers.get(pid, (None, None))[index]) is not None]
    return median([float(v) for v in values])


def worker_rows(samples: Samples) -> list[WorkerRow]:
    baseline, end = samples.of("baseline"), samples.of("end")
    pids = sorted({pid for s in samples.taken for pid in s.workers})
    rows = []
    for pid in pids:
        cells = []
        for index in (0, 1):
            seen = [float(v) for s in samples.taken if (v := s.workers.get(pid, (None, None))[index]) is not None]
            peak = max(seen) if seen else None
            cells.append((settled_value(baseline, pid, index), peak, settled_value(end, pid, index)))
        rows.append(WorkerRow(pid, cells[0], cells[1]))
    return rows


def change(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before * 100


def back(before: float | None, after: float | None, tolerance: float) -> bool | None:
    pct = change(before, after)
    return None if pct is None else pct <= tolerance


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def verdict(ok: bool | None) -> str:
    return "?" if ok is None else ("yes" if ok else "NO")


def render(rows: list[WorkerRow], tolerance: float) -> str:
    head = (
        "| worker (pid) | RSS MB baseline | peak | end | end vs baseline "
        "| fds baseline | peak | end | end vs baseline |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row.pid} | {fmt(row.rss[0])} | {fmt(row.rss[1])} | {fmt(row.rss[2])} | "
            f"{fmt_pct(change(row.rss[0], row.rss[2]))} | {fmt(row.fds[0])} | {fmt(row.fds[1])} | {fmt(row.fds[2])} | "
            f"{fmt_pct(change(row.fds[0], row.fds[2]))} |"
        )
    rss_back = [back(r.rss[0], r.rss[2], tolerance) for r in rows]
    fds_back = [back(r.fds[0], r.fds[2], tolerance) for r in rows]
    lines += [
        "",
        f"- RSS back within {tolerance:.0f} % of baseline: {verdict(all_of(rss_back))}",
        f"- open file descriptors back within {tolerance:.0f} % of baseline: {verdict(all_of(fds_back))}",
    ]
    return "\n".join(lines)


def all_of(values: list[bool | None]) -> bool | None:
    if not values or any(v is None for v in values):
        return None
    return all(values)


def churn(sc: Scenario, args: argparse.Namespace, clients: int, seconds: float) -> dict[str, Any]:
    command = {
        "cmd": "churn", "path": sc.path, "clients": clients, "seconds": seconds, "life": args.life,
        "pause": args.pause, "resume": args.resume, "timeout": 30,
    }  # fmt: skip
    return sc.ask(command, seconds + 90)


def settle(samples: Samples, phase: str, seconds: float) -> None:
    samples.phase = phase
    log(f"  settling {seconds:.0f} s ({phase})")
    time.sleep(seconds)
    samples.take()


def run(opts: harness.Options, args: argparse.Namespace, samples_out: list[Samples]) -> tuple[dict[str, Any], str]:
    """The soak; returns the load generator's report and a line on what the workers did."""
    sc = Scenario(opts, "soak", start="live", server_env={"SSE_TOPIC_IDLE_S": str(args.idle)})
    log(f"soak: topic {sc.topic}, server port {sc.port}, {opts.processes} workers")
    try:
        sc.open()
        sc.guard()
        samples = Samples(sc, args.sample)
        samples_out.append(samples)
        first_pids = sorted(sc.server_pids())
        sc.start_loadgen()
        sc.start_producer(args.rate)
        samples.phase = "warm-up"
        log(f"  warm-up: {args.warmup_clients} clients churning for {args.warmup:.0f} s")
        churn(sc, args, args.warmup_clients, args.warmup)
        settle(samples, "baseline", args.settle)
        sc.ask({"cmd": "reset"}, 10)
        samples.phase = "soak"
        log(f"  soak: {args.clients} clients connecting and leaving at random for {args.minutes:g} min")
        churned = churn(sc, args, args.clients, args.minutes * 60)
        report = sc.ask({"cmd": "report"}, 60)
        log(f"  {churned.get('fresh', 0)} fresh and {churned.get('resumed', 0)} resumed streams; all left")
        settle(samples, "end", args.settle)
        samples.stop()
        health = [sc.health() for _ in range(4)]
        workers = sorted(sc.server_pids())
        restarted = "" if workers == first_pids else f"; workers changed from {first_pids} to {workers} (restarts)"
        open_streams = sorted({int(h["streams"]) for h in health if h and "streams" in h})
        cached = sorted({int(h["cache_bytes"]) for h in health if h and "cache_bytes" in h})
        note = f"/-/health at the end: streams {open_streams}, cache bytes {cached}{restarted}"
        return {**report, **churned}, note
    finally:
        sc.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Soak benchmark (see bench/README.md).")
    parser.add_argument("--quick", action="store_true", help="~1 min, 200 clients, shorter settle times")
    parser.add_argument("--minutes", type=float, help="how long clients churn (default 10; quick 1)")
    parser.add_argument("--clients", type=int, help="clients connecting and leaving (default 2000; quick 200)")
    parser.add_argument("--rate", type=float, default=20, help="topic rate, msg/s (default 20)")
    parser.add_argument("--life", type=float, default=20, help="mean seconds a client stays (default 20)")
    parser.add_argument("--pause", type=float, default=5, help="mean seconds before it comes back (default 5)")
    parser.add_argument("--resume", type=float, default=0.5, help="share of reconnections resuming (default 0.5)")
    parser.add_argument("--warmup", type=float, default=20, help="warm-up churn, s (default 20)")
    parser.add_argument("--warmup-clients", type=int, default=50, help="clients churning in the warm-up (50)")
    parser.add_argument(
        "--idle", type=int, help=f"the server's SSE_TOPIC_IDLE_S (default {DEFAULT_IDLE_S}, its own default; quick 15)"
    )
    parser.add_argument("--settle", type=float, help="seconds without clients before the baseline and the end "
                        "(default: --idle + 20)")  # fmt: skip
    parser.add_argument("--sample", type=float, default=5, help="seconds between /proc readings (default 5)")
    parser.add_argument("--tolerance", type=float, default=10, help="end vs baseline, %% (default 10)")
    harness.add_server_args(parser, processes=2)
    args = parser.parse_args(argv)
    args.minutes = args.minutes or (1.0 if args.quick else 10.0)
    args.clients = args.clients or (200 if args.quick else 2000)
    args.idle = args.idle or (15 if args.quick else DEFAULT_IDLE_S)
    args.settle = args.settle if args.settle is not None else args.idle + 20
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nofile = harness.raise_nofile()
    harness.load_services_env()
    harness.setup_django()
    opts = harness.make_options(args)

    def on_term(signum: int, frame: object) -> None:
        raise Interrupted

    signal.signal(signal.SIGTERM, on_term)
    log(f"run {opts.run_id}: server code from {opts.app_dir}, RLIMIT_NOFILE {nofile}, logs in {opts.out_dir}")
    started = time.monotonic()
    holder: list[Samples] = []
    report: dict[str, Any] = {}
    notes: list[str] = []
    try:
        report, note = run(opts, args, holder)
        notes.append(note)
    except BenchError as exc:
        notes.append(f"failed: {str(exc)[:600]}")
        log(f"soak failed: {exc}")
    except (KeyboardInterrupt, Interrupted):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        notes.append("interrupted")
        log("interrupted: stopping everything this run started")
    finally:
        if holder:
            holder[0].stop()
        Proc.stop_all()
    rows = worker_rows(holder[0]) if holder else []
    if report:
        notes.append(
            f"streams: {report.get('fresh', 0)} fresh, {report.get('resumed', 0)} resumed with Last-Event-ID, "
            f"{report.get('failed', 0)} failed to open; {report['events']} events, {report['gaps']} gaps, "
            f"{report['duplicates']} duplicates (sequence numbers per partition, across resumes); "
            f"delivery latency p50 {fmt((report['p50'] or 0) * 1000, 1)} ms, p99 {fmt((report['p99'] or 0) * 1000, 1)} "
            f"ms; errors: {fmt_errors(report['errors'])}"
        )
    header = (
        f"## Soak, run {opts.run_id} ({time.monotonic() - started:.0f} s)\n\n"
        f"{opts.processes} workers of platform/web.py; {args.clients} clients connecting and leaving at random for "
        f"{args.minutes:g} min (stay ~{args.life:g} s, away ~{args.pause:g} s, {args.resume:.0%} of reconnections "
        f"resume), {args.rate:g} msg/s on a live route, {harness.PARTITIONS} partitions of "
        f"{harness.MESSAGE_BYTES} B messages; warm-up {args.warmup:g} s with {args.warmup_clients} clients; baseline "
        f"and end: median of the last {END_SAMPLES} readings after {args.settle:g} s without clients "
        f"(SSE_TOPIC_IDLE_S={args.idle}); readings every {args.sample:g} s from /proc.\n"
    )
    text = header + "\n" + render(rows, args.tolerance) + "\n" + "\n".join(f"- {n}" for n in notes)
    print(text, flush=True)
    (opts.out_dir / f"soak-{opts.run_id}.md").write_text(text + "\n")
    taken = [{"at": s.at, "phase": s.phase, "workers": s.workers} for s in holder[0].taken] if holder else []
    (opts.out_dir / f"soak-{opts.run_id}.json").write_text(json.dumps({"report": report, "samples": taken}, indent=1))
    log(f"table and readings saved under {opts.out_dir}")
    return 0 if report else 1


if __name__ == "__main__":
    sys.exit(main())
