"""SSE fan-out benchmark: clients x topic rate against one web process, printed as one markdown table.

    platform/with-services.sh -- .venv/bin/python bench/fanout.py [--quick] [--scenarios ...]

See bench/README.md for what it runs and what each column means. In short, for every scenario it creates a
fresh 4-partition topic and a route to it, and starts three processes: a fresh server under test (one
`python -m streams.server` process, the project's daphne; or platform/web.py with --processes N), a producer
(1 KiB JSON messages at the scenario's rate, each carrying its send time) and the load generator
(bench/loadgen.py). Then it measures a window. Every process it starts is stopped at the end of its scenario,
and on Ctrl-C or SIGTERM; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: bench/ is on sys.path, the checkout holding it is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.harness import (
    CLK_TCK,
    NCPU,
    PARTITIONS,
    BenchError,
    Interrupted,
    Options,
    Proc,
    cpu_ticks,
    fmt_errors,
    log,
    machine_ticks,
    rss_mb,
)

SATURATED = 0.95  # of one core
DEFAULT_SKIP_DEMAND = 2_000_000  # events/s: cells above it run only when named in --scenarios

# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    clients: str = ""
    rate: str = ""
    demand: float | None = None
    delivered: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    server_cpu: float | None = None
    tree_cpu: float | None = None  # the server and all its descendants (workers, fetch and host processes)
    consumer_cpu: float | None = None  # the consumer processes and their decoders (`python -m streams.kafka.*`)
    consumer_parts: dict[str, float] = field(default_factory=dict)  # the same by module
    all_back_s: float | None = None  # storm: until every client had its first event after resuming
    wire_bytes: float | None = None  # bytes a second the load generator received, headers and keep-alives too
    server_rss_mb: float | None = None
    worker_rss_mb: float | None = None  # the largest server process's
    edge_cpu: float | None = None  # the edge in front (--configs), counted in the node's CPU too
    edge_rss_mb: float | None = None
    kib_per_stream: float | None = None  # idle: what the node (edge and server tree) holds per open stream
    loadgen_cpu: float | None = None
    companions_cpu: float | None = None  # --node: the Celery worker (its Spark JVM too), beat, the demo producer
    kafka_cpu: float | None = None  # broker + producer
    machine_cpu: float | None = None
    fetch_streams: Any = None
    consumers: Any = None
    broker_conns: int | None = None
    errors: str = ""
    saturated: str = ""
    target: str = ""
    met: str = ""
    notes: list[str] = field(default_factory=list)
    step: int = -1  # the scenario's place in the plan: a row and its baseline share it


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if digits == 0:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def mark(ok: bool | None) -> str:
    return "?" if ok is None else ("✓" if ok else "✗")


def saturation(row: Row, server_max_cpu: float | None) -> str:
    who = []
    if server_max_cpu is not None and server_max_cpu >= SATURATED:
        who.append("server")
    if row.loadgen_cpu is not None and row.loadgen_cpu >= SATURATED:
        who.append("loadgen")
    if not who and row.machine_cpu is not None and row.machine_cpu >= SATURATED * NCPU:
        who.append(f"machine ({NCPU} cores busy)")
    return " + ".join(who) or "none"


def per_event_us(row: Row) -> float | None:
    """CPU of the server and its children per delivered event, µs."""
    if row.tree_cpu is None or not row.delivered:
        return None
    return row.tree_cpu / row.delivered * 1e6


NODE_STORM_CLIENTS = 9000
COMPANIONS: harness.Companions | None = None  # --node: what `make run` runs beside the web workers
BASELINE = "baseline: "  # the prefix of the hand-written baseline's rows
SHAPED = "shaped: "  # the prefix of the rows whose route has --shaped's options


def wire_bytes_per_event(row: Row) -> float | None:
    """Bytes on the wire per message the clients were sent (per message wanted: a filter or conflation that
    sends fewer events costs fewer bytes), so that a shaped row and its plain one compare."""
    if row.wire_bytes is None or not row.demand:
        return None
    return row.wire_bytes / row.demand


def ratio(platform: float | None, baseline: float | None) -> str:
    return "-" if platform is None or not baseline else f"{platform / baseline:.2f}"


def render_ratios(rows: list[Row]) -> str:
    """Each platform row against the baseline row of the same scenario in the same run, and each shaped row
    against the plain row of the same scenario."""
    tables = []
    # Each platform row (each configuration's, each worker count's) with the baseline run beside it, in the same step.
    baselines = {r.step: r for r in rows if r.scenario.startswith(BASELINE)}
    pairs = [
        (r, baselines[r.step])
        for r in rows
        if r.step in baselines and not r.scenario.startswith((BASELINE, SHAPED)) and r is not baselines[r.step]
    ]
    if pairs:
        tables.append(
            ratio_table(
                "Platform ÷ baseline, same run (above 1: the platform is slower or costs more; delivered: below 1 "
                "it delivers less):",
                pairs,
            )
        )
    # Each shaped row with the plain row that ran next to it: the n-th of each (with `plain_rate` their names differ).
    shaped = [r for r in rows if r.scenario.startswith(SHAPED)]
    plain = [r for r in rows if not r.scenario.startswith((BASELINE, SHAPED))]
    pairs = list(zip(shaped, plain, strict=False)) if len(shaped) == len(plain) else []
    if pairs:
        tables.append(
            ratio_table(
                "Shaped ÷ plain route, same run (CPU per event: per event delivered; bytes per message: on the "
                "wire, per message produced per client):",
                pairs,
            )
        )
    return "\n\n".join(tables)


def ratio_table(title: str, pairs: list[tuple[Row, Row]]) -> str:
    head = ["scenario", "delivered", "p50", "p99", "CPU with children", "CPU per event", "bytes per message"]
    head.append("storm: all back")
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r, b in pairs:
        cells = [
            r.scenario,
            ratio(r.delivered, b.delivered),
            ratio(r.p50_ms, b.p50_ms),
            ratio(r.p99_ms, b.p99_ms),
            ratio(r.tree_cpu, b.tree_cpu),
            ratio(per_event_us(r), per_event_us(b)),
            ratio(wire_bytes_per_event(r), wire_bytes_per_event(b)),
            ratio(r.all_back_s, b.all_back_s),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(rows: list[Row]) -> str:
    head = [
        "scenario",
        "clients",
        "msg/s",
        "ev/s wanted",
        "ev/s delivered",
        "p50 ms",
        "p99 ms",
        "server CPU",
        "edge CPU",
        "CPU with children",
        "µs CPU per event",
        "server RSS MB",
        "edge RSS MB",
        "KiB per idle stream",
        "loadgen CPU",
        "broker+producer CPU",
        "machine CPU",
        "fetch streams",
        "kafka consumers",
        "broker conns",
        "errors",
        "saturated",
        "target",
        "met",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.scenario,
            r.clients,
            r.rate,
            fmt_num(r.demand),
            fmt_num(r.delivered),
            fmt_num(r.p50_ms, 1),
            fmt_num(r.p99_ms, 1),
            fmt_num(r.server_cpu, 2),
            fmt_num(r.edge_cpu, 2),
            fmt_num(r.tree_cpu, 2),
            fmt_num(per_event_us(r), 1),
            fmt_num(r.server_rss_mb),
            fmt_num(r.edge_rss_mb),
            fmt_num(r.kib_per_stream, 1),
            fmt_num(r.loadgen_cpu, 2),
            fmt_num(r.kafka_cpu, 2),
            fmt_num(r.machine_cpu, 2),
            "-" if r.fetch_streams is None else str(r.fetch_streams),
            "-" if r.consumers is None else str(r.consumers),
            fmt_num(r.broker_conns),
            r.errors,
            r.saturated,
            r.target,
            r.met,
        ]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    notes = [f"- **{r.scenario}**: {note}" for r in rows for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


class Sampler:
    """CPU ticks of the processes of a scenario, and of the machine, at one instant."""

    def __init__(
        self, server_pids: list[int], tree_pids: list[int], loadgen: int | None, kafka: list[int], edge: list[int]
    ) -> None:
        self.at = time.monotonic()
        self.server = {pid: cpu_ticks(pid) for pid in server_pids}
        self.tree = {pid: cpu_ticks(pid) for pid in [*tree_pids, *edge]}  # the node: the server's tree and its edge
        self.edge = {pid: cpu_ticks(pid) for pid in edge}
        self.consumers = {pid: module for pid in tree_pids if (module := _consumer_module(pid))}
        self.loadgen = cpu_ticks(loadgen)
        self.companions = {pid: cpu_ticks(pid) for pid in (COMPANIONS.pids() if COMPANIONS is not None else [])}
        self.listen = listen_counters()
        self.kafka = [cpu_ticks(pid) for pid in kafka]
        self.machine = machine_ticks()[0]

    @staticmethod
    def cores(before: int | None, after: int | None, seconds: float) -> float | None:
        if before is None or after is None or seconds <= 0:
            return None
        return (after - before) / CLK_TCK / seconds

    def until(self, later: Sampler, row: Row) -> float | None:
        """Fill the CPU columns for the interval up to `later`; returns the busiest server process."""
        seconds = later.at - self.at
        per_process = [self.cores(self.server.get(pid), ticks, seconds) for pid, ticks in later.server.items()]
        known = [c for c in per_process if c is not None]
        row.server_cpu = sum(known) if known else None
        tree = [self.cores(self.tree.get(pid), ticks, seconds) for pid, ticks in later.tree.items()]
        row.tree_cpu = sum(c for c in tree if c is not None) if any(c is not None for c in tree) else None
        row.consumer_parts = {}
        for pid, module in self.consumers.items():
            cores = self.cores(self.tree.get(pid), later.tree.get(pid), seconds)
            if cores is not None and pid in later.consumers:
                row.consumer_parts[module] = row.consumer_parts.get(module, 0.0) + cores
        row.consumer_cpu = sum(row.consumer_parts.values()) if row.consumer_parts else None
        edge = [self.cores(self.edge.get(pid), ticks, seconds) for pid, ticks in later.edge.items()]
        row.edge_cpu = sum(c for c in edge if c is not None) if any(c is not None for c in edge) else None
        row.loadgen_cpu = self.cores(self.loadgen, later.loadgen, seconds)
        if self.companions:
            parts = [self.cores(ticks, later.companions.get(pid), seconds) for pid, ticks in self.companions.items()]
            row.companions_cpu = sum(c for c in parts if c is not None)
        kafka = [self.cores(a, b, seconds) for a, b in zip(self.kafka, later.kafka, strict=True)]
        row.kafka_cpu = sum(k for k in kafka if k is not None) if any(k is not None for k in kafka) else None
        row.machine_cpu = self.cores(self.machine, later.machine, seconds)
        return max(known) if known else None


def listen_counters() -> dict[str, int]:
    """The kernel's TcpExt ListenOverflows and ListenDrops (what `nstat` shows): handshakes dropped because an accept
    queue was full, or for any reason, machine-wide."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/netstat").read_text().splitlines()
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            if names.startswith("TcpExt:"):
                for name, value in zip(names.split()[1:], values.split()[1:], strict=False):
                    if name in ("ListenOverflows", "ListenDrops"):
                        found[name] = int(value)
    return found


def _consumer_module(pid: int) -> str | None:
    """The module `pid` runs if it is a consumer or decoder process (`python -m streams.kafka.<module>`)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    found = next((part.decode() for part in command if part.startswith(b"streams.kafka.")), None)
    for mode in (b"host", b"decode"):  # the historical readers' host, the decoded topics' fetch process
        if found is not None and mode in command[-3:]:
            return f"{found} {mode.decode()}"
    return found


class Scenario(harness.Scenario):
    """A scenario that fills the table's columns from the server's state."""

    def sample(self) -> Sampler:
        loadgen = self.loadgen.pid if self.loadgen else None
        return Sampler(self.server_pids(), self.tree_pids(), loadgen, self.kafka_pids(), self.edge_pids())

    def node_rss_mb(self) -> float:
        """What the node holds: the server, its children (fetch and host processes) and the edge."""
        return sum(rss_mb(pid) or 0.0 for pid in {*self.tree_pids(), *self.edge_pids()})

    def fill_server_state(self, row: Row) -> None:
        pids = self.server_pids()
        rss = [rss_mb(pid) for pid in pids]
        row.server_rss_mb = sum(r for r in rss if r is not None) if any(r is not None for r in rss) else None
        row.worker_rss_mb = max((r for r in rss if r is not None), default=None)
        edge = [rss_mb(pid) for pid in self.edge_pids()]
        row.edge_rss_mb = sum(r for r in edge if r is not None) if any(r is not None for r in edge) else None
        row.broker_conns = self.broker_conns()
        health = self.health()
        if health is None:
            row.notes.append("/-/health did not answer within 5 s at the end of the window")
            return
        row.fetch_streams = health.get("fetch_streams")
        row.consumers = health.get("kafka_consumers", health.get("kafka_readers"))


class OpenFailed(Exception):
    """A scenario's set-up failed: its row says why, and it has nothing else to measure."""

    def __init__(self, row: Row) -> None:
        super().__init__(row.scenario)
        self.row = row


@contextlib.contextmanager
def scenario(opts: Options, name: str, row: Row, **kwargs: Any) -> Iterator[Scenario]:
    sc = Scenario(opts, name, **kwargs)
    log(f"scenario {name}: topic {sc.topic}, server port {sc.port}")
    opened = False
    try:
        sc.open()
        sc.guard()
        opened = True
        yield sc
    except BenchError as exc:
        reason = sc.guard_tripped or str(exc)
        row.notes.append(reason.replace("\n", " ")[:600])
        row.met = "aborted" if sc.guard_tripped else "failed"
        log(f"scenario {name} failed: {reason}")
        if sc.loadgen is not None and sc.loadgen.alive():
            with contextlib.suppress(BenchError):
                row.errors = fmt_errors(sc.loadgen.ask({"cmd": "report"}, 20)["errors"])
    finally:
        if sc.guard_tripped and sc.guard_tripped not in row.notes:
            row.notes.append(sc.guard_tripped)
        if sc.max_broker_conns and (row.broker_conns or 0) < sc.max_broker_conns:
            row.notes.append(f"up to {sc.max_broker_conns} server connections to the broker during the scenario")
        sc.close()
    if not opened:
        raise OpenFailed(row)  # the `with` body never ran: nothing of it may run now


def targets_for(clients: int, rate: int, coalescing_off: bool) -> list[tuple[str, str]]:
    """(label, check) pairs; checks: delivered>=N, p99<=N ms, rss<=N, fetch=N."""
    found: list[tuple[str, str]] = []
    if coalescing_off:
        found.append(("≥ 25 000 ev/s (coalescing off)", "delivered>=25000"))
    elif clients == 1000 and rate == 1000:
        found.append(("≥ 150 000 ev/s", "delivered>=150000"))
    if clients == 1000 and rate == 100 and not coalescing_off:
        found.append(("p99 ≤ 100 ms", "p99<=100"))
    if clients == 10000 and rate == 10:
        found.append(("p99 ≤ 250 ms", "p99<=250"))
    if clients >= 10000:
        found.append(("RSS ≤ 500 MB", "rss<=500"))
    found.append((f"fetch streams = {PARTITIONS}", f"fetch={PARTITIONS}"))
    return found


def check(row: Row, rule: str) -> bool | None:
    if rule.startswith("delivered>="):
        return None if row.delivered is None else row.delivered >= float(rule.split(">=")[1])
    if rule.startswith("p99<="):
        return None if row.p99_ms is None else row.p99_ms <= float(rule.split("<=")[1])
    if rule.startswith("rss<="):
        return None if row.server_rss_mb is None else row.server_rss_mb <= float(rule.split("<=")[1])
    if rule.startswith("fetch="):
        value = row.fetch_streams
        return None if not isinstance(value, int) else value == int(rule.split("=")[1])
    raise ValueError(rule)


def apply_targets(row: Row, targets: list[tuple[str, str]]) -> None:
    row.target = "; ".join(label for label, _ in targets)
    if not row.met:  # failed, aborted and skipped rows say so instead
        row.met = " ".join(mark(check(row, rule)) for _, rule in targets)


def connect_budget(clients: int) -> float:
    return 30 + clients * 0.015


def run_cell(opts: Options, clients: int, rate: int, *, coalescing_off: bool = False, values: str = "json") -> Row:
    rate = opts.rate or rate
    name = f"{clients}x{rate}" + (" no-coalesce" if coalescing_off else "") + (" avro" if values == "avro" else "")
    row = Row(name, clients=str(clients), rate=str(rate), demand=clients * rate)
    extra_env = {"SSE_COALESCE_MS": "0"} if coalescing_off else {}
    with scenario(opts, name, row, start="live", server_env=extra_env, values=values) as sc:
        sc.start_loadgen()
        budget = connect_budget(clients)
        path = sc.path + opts.query
        reply = sc.ask({"cmd": "connect", "path": path, "n": clients, "batch": opts.batch, "timeout": 30}, budget)
        row.clients = f"{reply['ok']}/{clients}"
        log(f"  {reply['ok']}/{clients} streams open in {reply['seconds']:.1f}s")
        if reply["ok"] == 0:
            raise BenchError(f"no stream opened: {fmt_errors(reply['errors'])}")
        row.notes.append(f"{reply['ok']} streams opened in {reply['seconds']:.1f} s")
        sc.start_producer(rate)
        ready = sc.ask({"cmd": "wait_events", "timeout": 15}, 30)
        if ready["waiting"]:
            row.notes.append(f"{ready['waiting']} streams had no event 15 s after the producer started")
        time.sleep(opts.warmup_s)
        sc.ask({"cmd": "reset"}, 10)
        before = sc.sample()
        time.sleep(opts.window_s)
        report = sc.ask({"cmd": "report"}, 60)
        after = sc.sample()
        busiest = before.until(after, row)
        row.delivered = report["events"] / report["seconds"]
        row.wire_bytes = report["bytes"] / report["seconds"]
        row.p50_ms = report["p50"] * 1000 if report["p50"] is not None else None
        row.p99_ms = report["p99"] * 1000 if report["p99"] is not None else None
        row.errors = fmt_errors(report["errors"])
        if report["lost"]:
            row.notes.append(f"{report['lost']} streams closed by the server during the window")
        sc.fill_server_state(row)
        row.saturated = saturation(row, busiest)
        if row.consumer_cpu is not None:
            per_record = row.consumer_cpu / rate * 1e6 / max(1, opts.processes)
            parts = ", ".join(f"{name.rsplit('.', 1)[-1]} {cores:.3f}" for name, cores in row.consumer_parts.items())
            row.notes.append(
                f"consumer processes (fetch, history host, their decoders): {row.consumer_cpu:.3f} cores ({parts}), "
                f"{per_record:.0f} µs CPU per record fetched"
            )
    apply_targets(row, targets_for(clients, rate, coalescing_off))
    return row


IDLE_WARM = 100  # streams opened first, so that what a process loads once is in the baseline reading
IDLE_SETTLE_S = 5.0


def run_idle(opts: Options, n: int) -> Row:
    """Memory per open idle stream on the node: `n` streams open on a quiet live route, the node's RSS (server, its
    children and the edge) against its RSS with `IDLE_WARM` streams open."""
    row = Row(f"idle {n}", clients=str(n), rate="0")
    with scenario(opts, row.scenario, row, start="live") as sc:
        sc.start_loadgen()
        warm = sc.ask({"cmd": "connect", "path": sc.path, "n": IDLE_WARM, "batch": opts.batch, "timeout": 30}, 60)
        if warm["ok"] < IDLE_WARM:
            raise BenchError(f"only {warm['ok']}/{IDLE_WARM} warm-up streams opened: {fmt_errors(warm['errors'])}")
        time.sleep(IDLE_SETTLE_S)
        before = sc.node_rss_mb()
        reply = sc.ask(
            {"cmd": "connect", "path": sc.path, "n": n, "batch": opts.batch, "timeout": 30}, connect_budget(n)
        )
        row.clients = f"{reply['ok']}/{n}"
        log(f"  {reply['ok']}/{n} streams open in {reply['seconds']:.1f}s")
        if reply["ok"] == 0:
            raise BenchError(f"no stream opened: {fmt_errors(reply['errors'])}")
        time.sleep(IDLE_SETTLE_S)
        after = sc.node_rss_mb()
        row.kib_per_stream = (after - before) * 1024 / reply["ok"]
        row.notes.append(
            f"node RSS {before:.0f} MB with {IDLE_WARM} streams, {after:.0f} MB with {reply['ok']} more "
            f"({row.kib_per_stream:.1f} KiB each); streams opened in {reply['seconds']:.1f} s"
        )
        row.errors = fmt_errors(reply["errors"])
        sc.fill_server_state(row)
    row.target = "-"
    row.met = row.met or "-"
    return row


def run_ttfe(opts: Options, n: int) -> Row:
    row = Row("time to first event", clients=str(n), rate="history")
    with scenario(opts, row.scenario, row, start="historical") as sc:
        producer = sc.start_producer(1000, count=200)
        if producer.popen.wait(30) != 0:
            raise BenchError(f"prefill producer failed:\n{producer.tail()}")
        sc.start_loadgen()
        anchor = sc.ask({"cmd": "connect", "path": sc.path, "n": 1, "timeout": 30}, 40)
        if not anchor["ok"]:
            raise BenchError(f"the anchor stream did not open: {fmt_errors(anchor['errors'])}")
        sc.ask({"cmd": "wait_events", "timeout": 10}, 20)
        before = sc.sample()
        reply = sc.ask({"cmd": "ttfe", "path": sc.path, "n": n, "timeout": 5}, min(240, 30 + n * 5.5))
        after = sc.sample()
        busiest = before.until(after, row)
        row.clients = f"{reply['ok']}/{n}"
        row.p50_ms = reply["p50"] * 1000 if reply["p50"] is not None else None
        row.p99_ms = reply["p99"] * 1000 if reply["p99"] is not None else None
        row.errors = fmt_errors(reply["errors"])
        if reply["headers_p50"] is not None:
            row.notes.append(
                f"p50/p99 = connect → first event of {n} clients one after the other, on a historical route whose "
                f"topic holds 200 messages and already has one stream open (so the first event is immediate); "
                f"connect → response headers p50 {reply['headers_p50'] * 1000:.1f} ms, "
                f"p99 {reply['headers_p99'] * 1000:.1f} ms, max to first event {reply['max'] * 1000:.1f} ms"
            )
        sc.fill_server_state(row)
        row.saturated = saturation(row, busiest)
    apply_targets(row, [("p99 ≤ 50 ms", "p99<=50"), (f"fetch streams = {PARTITIONS}", f"fetch={PARTITIONS}")])
    return row


class Peak:
    """Samples the server's broker connections and Kafka consumers every 0.5 s until stopped; keeps the peaks."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.conns = 0
        self.consumers = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            self.conns = max(self.conns, self.sc.broker_conns())
            health = self.sc.health(limit_s=2.0)
            if health is not None:
                value = health.get("kafka_consumers", health.get("kafka_readers"))
                if isinstance(value, int):
                    self.consumers = max(self.consumers, value)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def run_storm(opts: Options, n: int, rate: int) -> Row:
    row = Row("reconnect storm", clients=str(n), rate=str(rate))
    resumed_ok: bool | None = None
    no_consumer_per_client: bool | None = None
    with scenario(opts, row.scenario, row, start="live") as sc:
        sc.start_loadgen()
        reply = sc.ask(
            {"cmd": "connect", "path": sc.path, "n": n, "batch": opts.batch, "timeout": 30, "track": True},
            connect_budget(n),
        )
        log(f"  {reply['ok']}/{n} streams open in {reply['seconds']:.1f}s")
        if reply["ok"] == 0:
            raise BenchError(f"no stream opened: {fmt_errors(reply['errors'])}")
        sc.start_producer(rate)
        ready = sc.ask({"cmd": "wait_events", "timeout": 20}, 40)
        time.sleep(1.0)
        dropped = sc.ask({"cmd": "drop"}, 30)
        log(
            f"  dropped {dropped['dropped']} streams ({dropped['with_id']} with an event id, from "
            f"{dropped.get('sources', 1) or 1} source addresses); reconnecting at once"
        )
        time.sleep(1.0)  # messages pile up meanwhile: each client's next event is waiting when it resumes
        peak = Peak(sc)
        before = sc.sample()
        sc.ask({"cmd": "reset"}, 10)
        storm = sc.ask({"cmd": "reconnect", "timeout": 60}, 90)
        after = sc.sample()
        peak.stop()
        busiest = before.until(after, row)
        cpu_s = (row.server_cpu or 0.0) * (after.at - before.at)
        time.sleep(1.0)
        report = sc.ask({"cmd": "report"}, 30)
        row.clients = f"{storm['resumed']}/{ready['ready']}"
        row.p50_ms = storm["p50"] * 1000 if storm["p50"] is not None else None
        row.p99_ms = storm["p99"] * 1000 if storm["p99"] is not None else None
        row.errors = fmt_errors(report["errors"])
        all_s = storm["all_seconds"]
        row.all_back_s = all_s
        resumed_ok = all_s is not None and all_s <= 10
        row.notes.append(
            f"p50/p99 = reconnect start → first event after resuming, per client; all {storm['asked']} resumed "
            + (f"in {all_s:.2f} s" if all_s is not None else f"NOT within 60 s ({storm['failed']} failed)")
            + (
                f" (headers p50 {storm['headers_p50'] * 1000:.0f} ms, p99 {storm['headers_p99'] * 1000:.0f} ms)"
                if storm["headers_p50"] is not None
                else ""
            )
            + f"; peak during the storm: {peak.conns} server connections to the broker, "
            f"{peak.consumers} Kafka consumers/readers (/-/health); "
            f"resume continuity: {report['gaps']} gaps, {report['duplicates']} duplicates; "
            f"server CPU during the storm {cpu_s:.1f} s, {cpu_s / max(1, storm['resumed']) * 1000:.2f} ms per resume "
            "(a figure that depends less than the times on what else the machine runs)"
        )
        overflows = {k: v - before.listen.get(k, 0) for k, v in after.listen.items()}
        row.notes.append(
            f"clients from {dropped.get('sources', 1) or 1} source address(es); during the storm the kernel counted "
            f"{overflows.get('ListenOverflows', 0)} listen overflows and {overflows.get('ListenDrops', 0)} listen "
            f"drops (TcpExt, machine-wide); edge CPU {fmt_num(row.edge_cpu, 2)} cores"
            + (
                f"; beside it the Celery worker, beat and the demo producer took {row.companions_cpu:.2f} cores"
                if row.companions_cpu is not None
                else ""
            )
        )
        sc.fill_server_state(row)
        row.notes.append(f"RSS of the largest server process after the storm: {fmt_num(row.worker_rss_mb)} MB")
        row.consumers = peak.consumers or row.consumers
        row.broker_conns = max(peak.conns, row.broker_conns or 0)
        no_consumer_per_client = row.broker_conns < max(10, n // 10)
        row.saturated = saturation(row, busiest)
    row.target = (
        f"all resumed ≤ 10 s; no Kafka consumer per client; RSS ≤ 500 MB per process; fetch streams = {PARTITIONS}"
    )
    if not row.met:
        rss_ok = None if row.worker_rss_mb is None else row.worker_rss_mb <= 500
        marks = [mark(resumed_ok), mark(no_consumer_per_client), mark(rss_ok)]
        row.met = " ".join([*marks, mark(check(row, f"fetch={PARTITIONS}"))])
    return row


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def plan(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """The scenarios to run, in order: ("cell", (clients, rate)) | ("skip", (clients, rate)) | ..."""
    tokens = [t.strip() for t in (args.scenarios or "matrix,nocoalesce,ttfe,storm").split(",") if t.strip()]
    steps: list[tuple[str, Any]] = []
    for item in tokens:
        if item == "matrix":
            for clients in args.clients:
                for rate in args.rates:
                    demand = clients * rate
                    steps.append(("cell" if demand <= args.skip_demand else "skip", (clients, rate)))
        elif item == "nocoalesce":
            steps.append(("nocoalesce", (max((c for c in args.clients if c <= 1000), default=1000), max(args.rates))))
        elif item == "ttfe":
            steps.append(("ttfe", args.ttfe_clients))
        elif item == "storm":
            steps.append(("storm", args.storm_clients))
        elif item == "idle":
            steps.append(("idle", args.idle_clients))
        elif "x" in item:
            clients, _, rate = item.partition("x")
            # With several value formats, each cell runs once per format, one after the other.
            steps += [("cell", (int(clients), int(rate), values)) for values in args.values]
        else:
            sys.exit(f"fanout: unknown scenario {item!r} (matrix, nocoalesce, ttfe, storm or CLIENTSxRATE)")
    return steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="SSE fan-out benchmark (see bench/README.md).", formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small and short: 1 and 100 clients, 3 s windows")
    parser.add_argument(
        "--scenarios",
        help="comma-separated: matrix, nocoalesce, ttfe, storm, idle (memory per open idle stream), or\n"
        "CLIENTSxRATE cells such as 1000x100 (default: matrix,nocoalesce,ttfe,storm)",
    )
    parser.add_argument("--clients", type=parse_ints, help="matrix clients (default 1,100,1000,10000; quick 1,100)")
    parser.add_argument("--rates", type=parse_ints, default=[10, 100, 1000], help="matrix topic rates, msg/s")
    parser.add_argument("--window", type=float, help="measurement window, s (default 10; quick 3)")
    parser.add_argument("--warmup", type=float, help="warm-up after the first events, s (default 3; quick 1)")
    parser.add_argument("--ttfe-clients", type=int, help="sequential new clients (default 200; quick 50)")
    parser.add_argument(
        "--storm-clients",
        type=int,
        help=f"reconnect storm size (default 10000; --node {NODE_STORM_CLIENTS}; quick 100)",
    )
    parser.add_argument("--storm-rate", type=int, help="topic rate during the storm, msg/s (default 10; --node 40)")
    parser.add_argument("--idle-clients", type=int, default=8000, help="open idle streams for `idle` (default 8000)")
    parser.add_argument(
        "--skip-demand",
        type=int,
        default=DEFAULT_SKIP_DEMAND,
        help="matrix cells wanting more events/s are skipped unless named (default 2 000 000: skips 10000x1000)",
    )
    parser.add_argument(
        "--values",
        type=lambda text: [v.strip() for v in text.split(",") if v.strip()],
        default=["json"],
        help="CLIENTSxRATE cells' values: json (raw JSON), avro (Avro through a schema registry, decoded by the\n"
        "server), or json,avro: both, alternating (default json)",
    )
    parser.add_argument(
        "--registry", help="the schema registry's Confluent API for avro (default: start Apicurio for the run)"
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also run each live JSON cell and the storm against the hand-written baseline\n"
        "(bench/baseline_server.py --kafka: one asyncio process), alternating, and print the ratios",
    )
    parser.add_argument(
        "--shaped",
        type=json.loads,
        help="also run each cell against the route with these options, alternating, and print the ratios: JSON\n"
        "with `route` (more arguments of do_put_route), `query` (what the streams' URLs end with) and\n"
        "`plain_rate` (the plain route's topic rate, msg/s, when it should deliver what the shaped one does), e.g.\n"
        '\'{"route": {"filters": [{"expression": "value.s %% 2 == 0"}]}}\'',
    )
    parser.add_argument("--key", default="", help="every message's key, for conflation on one hot key (default none)")
    parser.add_argument(
        "--node",
        action="store_true",
        help="run against what `make run` starts: platform/web.py with its default workers (or --processes) and\n"
        "its HAProxy edge and per-address limits, plus the Celery worker, beat and the demo producer\n"
        "(platform/Procfile), kept running through the whole run, the baseline's scenarios too;\n"
        "messages of 200 B, the storm at 40 msg/s, clients from --source-addresses",
    )
    parser.add_argument(
        "--source-addresses",
        type=int,
        help="the load generator's clients connect from this many loopback addresses (127.0.0.1, .2, ...,\n"
        "127.0.1.1...), client i from the i-th modulo N (default 0: all from 127.0.0.1; --node: one per client)",
    )
    parser.add_argument(
        "--worker-counts",
        type=parse_ints,
        default=[],
        help="run each scenario once per web worker count (platform/web.py's WEB_PROCESSES), alternating the\n"
        "order from one scenario to the next; rows `N workers: ...` (e.g. --node --worker-counts 1,2)",
    )
    parser.add_argument("--message-bytes", type=int, help="message size, B (default 1024; --node 200)")
    parser.add_argument(
        "--node-warm",
        type=float,
        default=150.0,
        help="--node: wait up to this long for the Celery worker's first rollup before the first scenario (s)",
    )
    harness.add_server_args(parser, processes=1)
    parser.set_defaults(processes=None)
    args = parser.parse_args(argv)
    if unknown := set(args.values) - {"json", "avro"}:
        parser.error(f"--values: unknown {', '.join(sorted(unknown))}")
    quick = args.quick
    args.clients = args.clients or ([1, 100] if quick else [1, 100, 1000, 10000])
    args.window = args.window or (3.0 if quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if quick else 3.0)
    args.ttfe_clients = args.ttfe_clients or (50 if quick else 200)
    # --node: 9 000, as the edge (one HAProxy, two descriptors per stream) holds at most 9 991 connections within
    # the development machine's hard RLIMIT_NOFILE of 20 000; the others would wait in its accept queue.
    args.storm_clients = args.storm_clients or (100 if quick else (NODE_STORM_CLIENTS if args.node else 10000))
    args.storm_rate = args.storm_rate or (40 if args.node else 10)
    args.message_bytes = args.message_bytes or (200 if args.node else harness.MESSAGE_BYTES)
    # --node: web.py's own default worker count unless --processes names one (0 in the options).
    args.processes = args.processes if args.processes is not None else (0 if args.node else 1)
    if args.source_addresses is None:
        most = max([args.storm_clients, args.idle_clients + IDLE_WARM, *args.clients]) if args.node else 0
        args.source_addresses = min(most, loadgen_max_sources())
    if args.worker_counts and args.configs:
        parser.error("--worker-counts and --configs: one or the other")
    return args


def loadgen_max_sources() -> int:
    from bench import loadgen  # noqa: PLC0415

    return loadgen.MAX_SOURCE_ADDRESSES


def skipped_row(clients: int, rate: int) -> Row:
    row = Row(f"{clients}x{rate}", clients=str(clients), rate=str(rate), demand=clients * rate)
    row.notes.append(
        f"skipped: {clients * rate:,} events/s wanted, far past one process; run it with --scenarios {clients}x{rate}"
    )
    row.met = "skipped"
    apply_targets(row, targets_for(clients, rate, coalescing_off=False))
    return row


def servers_for(opts: Options, args: argparse.Namespace, index: int, kind: str, what: Any) -> list[Options]:
    """The platform (each of `--configs`), and with --baseline the hand-written baseline too (for live JSON cells
    and the storm), or with --shaped the route with its options too (for cells), alternating which goes first from
    one scenario to the next."""
    if args.shaped is not None and kind == "cell":
        shaped = dataclasses.replace(opts, route=args.shaped.get("route", {}), query=args.shaped.get("query", ""))
        plain = dataclasses.replace(opts, rate=args.shaped.get("plain_rate"))
        return [shaped, plain] if index % 2 == 0 else [plain, shaped]
    platforms = harness.configurations(opts, args.configs, index)
    if args.worker_counts:
        each = [
            dataclasses.replace(opts, processes=n, label=f"{n} worker{'s' if n > 1 else ''}")
            for n in args.worker_counts
        ]
        shift = index % len(each)
        platforms = each[shift:] + each[:shift]
    json_cell = kind == "cell" and (what[2] if len(what) > 2 else "json") == "json"
    if not args.baseline or not (json_cell or kind == "storm"):
        return platforms
    baseline = dataclasses.replace(opts, baseline=True, processes=1)
    return [baseline, *platforms] if index % 2 == 0 else [*platforms, baseline]


def run_step(opts: Options, args: argparse.Namespace, kind: str, what: Any) -> Row:
    try:
        return run_kind(opts, args, kind, what)
    except OpenFailed as failed:
        return failed.row


def run_kind(opts: Options, args: argparse.Namespace, kind: str, what: Any) -> Row:
    if kind == "cell":
        clients, rate, *values = what
        return run_cell(opts, clients, rate, values=values[0] if values else "json")
    if kind == "nocoalesce":
        return run_cell(opts, *what, coalescing_off=True)
    if kind == "skip":
        return skipped_row(*what)
    if kind == "ttfe":
        return run_ttfe(opts, what)
    if kind == "storm":
        return run_storm(opts, what, args.storm_rate)
    if kind == "idle":
        return run_idle(opts, what)
    raise ValueError(kind)


def server_description(opts: Options, args: argparse.Namespace) -> str:
    if args.node:
        workers = (
            "/".join(str(n) for n in args.worker_counts)
            if args.worker_counts
            else (str(opts.processes) if opts.processes else "its default number of")
        )
        return (
            f"`make run`'s processes: platform/web.py ({workers} workers of `python -m {opts.server_module}` behind "
            "its HAProxy edge, default per-address limits), the Celery worker (solo pool, Spark), beat and the demo "
            "producer (platform/Procfile)"
        )
    return f"{opts.processes} x `python -m {opts.server_module}`"


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915  (one run, start to table)
    args = parse_args(argv)
    steps = plan(args)
    nofile = harness.raise_nofile()
    harness.load_services_env()
    harness.setup_django()
    opts = dataclasses.replace(
        harness.make_options(args, window_s=args.window, warmup_s=args.warmup),
        key=args.key,
        node=args.node,
        source_addresses=args.source_addresses,
        message_bytes=args.message_bytes,
    )
    registry = None
    if "avro" in args.values:
        if args.registry is None:
            registry = harness.start_registry(opts.out_dir / f"fanout-{opts.run_id}-registry.log")
        opts.registry = args.registry or registry.url  # type: ignore[union-attr]

    def on_term(signum: int, frame: object) -> None:
        raise Interrupted

    signal.signal(signal.SIGTERM, on_term)
    log(
        f"run {opts.run_id}: {len(steps)} scenarios, window {opts.window_s:.0f}s, warm-up {opts.warmup_s:.0f}s, "
        f"{opts.processes} web process(es), server code from {opts.app_dir}, RLIMIT_NOFILE {nofile}, "
        f"logs in {opts.out_dir}"
    )
    rows: list[Row] = []
    started = time.monotonic()
    interrupted = False
    global COMPANIONS  # noqa: PLW0603  (read by every Sampler)
    try:
        if args.node:
            COMPANIONS = harness.Companions(opts, opts.server_env)
            COMPANIONS.start(args.node_warm)
        for index, (kind, what) in enumerate(steps):
            for step_opts in servers_for(opts, args, index, kind, what):
                last = run_step(step_opts, args, kind, what)
                last.step = index
                if step_opts.baseline:
                    last.scenario = BASELINE + last.scenario
                elif step_opts.route or step_opts.query:
                    last.scenario = SHAPED + last.scenario
                elif step_opts.label:
                    last.scenario = f"{step_opts.label}: {last.scenario}"
                rows.append(last)
                log(
                    f"  -> {last.scenario}: delivered {fmt_num(last.delivered)} ev/s, p50 {fmt_num(last.p50_ms, 1)} "
                    f"ms, p99 {fmt_num(last.p99_ms, 1)} ms, server CPU {fmt_num(last.server_cpu, 2)}, met {last.met}"
                )
    except (KeyboardInterrupt, Interrupted):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted = True
        log("interrupted: stopping everything this run started")
    finally:
        if COMPANIONS is not None:
            COMPANIONS.stop()
        Proc.stop_all()
        if registry is not None:
            registry.stop()
    elapsed = time.monotonic() - started
    header = (
        f"## SSE fan-out, run {opts.run_id} ({'quick' if args.quick else 'full'}, {elapsed:.0f} s"
        f"{', interrupted' if interrupted else ''})\n\n"
        f"{NCPU} cores; server: {server_description(opts, args)}"
        f"{' ' + ' '.join(args.server_env) if args.server_env else ''}; {PARTITIONS} partitions, "
        f"{opts.message_bytes} B messages; "
        + (f"clients from {opts.source_addresses} loopback addresses; " if opts.source_addresses else "")
        + f"window {opts.window_s:.0f} s after {opts.warmup_s:.0f} s warm-up; "
        "latency = receipt in the load generator minus the send time embedded in the message by the producer; "
        "CPU in cores (1.00 = one core busy)"
        + (
            "; `baseline:` rows are the hand-written baseline (bench/baseline_server.py --kafka, one process) on "
            "the same broker and load generator"
            if args.baseline
            else ""
        )
        + ".\n"
    )
    ratios = render_ratios(rows)
    report = header + "\n" + render(rows) + ("\n\n" + ratios if ratios else "")
    print(report, flush=True)
    (opts.out_dir / f"fanout-{opts.run_id}.md").write_text(report + "\n")
    (opts.out_dir / f"fanout-{opts.run_id}.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    log(f"table and JSON saved under {opts.out_dir}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
