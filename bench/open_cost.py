"""What a stream's open costs in CPU, by phase: one server process, N streams resuming at once, µs per stream.

    .venv/bin/python bench/open_cost.py                         # 2 000 streams, 2 rounds (~2 min)
    .venv/bin/python bench/open_cost.py --streams 10000 --rounds 1
    .venv/bin/python bench/open_cost.py --app-dir /other/checkout  # that checkout's server, this bench

The shape is the reconnect storm's (bench/fanout.py `storm`) without the live traffic that blurs it there. A fresh
topic (4 partitions) with a `historical` route and `--history` messages; one server (`python -m streams.server`,
started through bench/harness.py) and the load generator (bench/loadgen.py). N streams connect, read the history
and are dropped; `--catch-up` messages are produced; once the server has closed every stream and idled a second,
all N come back at once with their `Last-Event-ID` and the window runs until each has its next event (+0.5 s for
what a stream does just after). That is done twice in the same process, once with the sampler off and once on
(the order alternates by round). The hand-written baseline (bench/baseline_server.py: one asyncio process that
parses the request by hand and writes headers and events in one chunk, no routing, guard, Kafka or metrics) goes
through the same steps in the same run, alternating with the server round by round.

How the CPU is counted, and why this way:

- **Totals** come from /proc, not from a profiler: the server process's utime+stime over the window (all its
  threads), the main thread's alone (`task/<pid>/stat`: the event loop; daphne runs Twisted's asyncio reactor
  there), and the fetch process (its child) apart, each less its idle rate measured just before, divided by the
  streams that resumed. Those are the figures to compare, here and across commits.
- **Phases** come from a stack sampler inside the server (bench/open_cost_sampler.py, a wrapper module that runs
  the server as `__main__`): SIGALRM every 1 ms, each sample weighted by the main thread's CPU since the one
  before, so the weights add up to the event loop's CPU however busy or idle it was. A deterministic profiler
  (cProfile) was the other choice; it charges a fixed cost to every Python call, so it inflates the call-heavy
  phases (route matching, guards, the event-id codec) against the ones spent in C (socket writes, JSON), and
  would move the shares it is meant to measure. The sampler costs a few µs per millisecond sampled, whatever
  the code does, and it is shown: the table gives the process's CPU per stream with the sampler on and off, and
  the handler's own. Phases are **shares of the sampled main thread**, applied to the main thread's CPU
  without the sampler.
- **Mapping** a sample to a phase: the innermost frame of its stack that a rule below names decides (so Twisted's
  socket write under `Flow.write` is the write, not Twisted's parsing); frames of Twisted, daphne and asyncio's
  selector only decide when no other rule matched. What no rule names is "the rest" (the event loop's own turns,
  the endpoint's own code, the hub's attach); its heaviest functions are listed under the table. The garbage
  collector's time is its own phase (from `gc.callbacks`): charged to whatever frame allocated when a
  collection fell due, its pauses made the other phases jump between storms.

The baseline has three of the phases (accept and parse, catch-up from memory, first write) and the rest (its
event loop). Figures move with the machine: read them as ratios within one run. Needs the services (`make
services-up`, or `var/services.env`); the table goes to stdout and, with the raw figures as JSON, to
var/bench/open-cost-<run>.md and .json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: bench/ is on sys.path, the checkout holding it is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.harness import BENCH, PY, BenchError, LoadGen, Proc, Scenario, log

ACCEPT = "accept + HTTP parse (daphne/Twisted)"
ROUTE = "route match"
GUARD = "guard + limits"
START = "start positions (describe, watermarks, plan)"
CATCH_UP = "catch-up read (cache, subscription, encode)"
WRITE = "first write (headers + events)"
BOOKKEEPING = "bookkeeping (metrics, delivery log, stall watch, logs, daphne's checkers)"
REST = "the rest (event loop, endpoint, hub attach)"
GC = "garbage collection"
PHASES = [ACCEPT, ROUTE, GUARD, START, CATCH_UP, WRITE, BOOKKEEPING, REST, GC]
TAIL_S = 0.5  # what a stream does just after its first event is part of its open
IDLE_S = 1.0

# (path fragment, qualname prefixes or None for any, phase): the first rule matching a frame names its phase.
RULES: list[tuple[str, tuple[str, ...] | None, str]] = [
    ("/streams/server/daphne.py", ("Flow.",), WRITE),
    ("/streams/server/", None, ACCEPT),
    ("/daphne/server.py", ("Server.handle_reply",), WRITE),
    ("/daphne/server.py", ("Server.application_checker", "Server.timeout_checker"), BOOKKEEPING),
    ("/daphne/http_protocol.py", ("WebRequest.handleReply",), WRITE),
    ("/streams/stream/pump.py", ("Pump.write", "Pump.write_now", "Pump._write"), WRITE),
    ("/streams/routes/filters.py", None, CATCH_UP),
    ("/streams/routes/", None, ROUTE),
    ("/streams/access/", None, GUARD),
    ("/streams/edge/limits.py", None, GUARD),
    ("/streams/hub/start_finder.py", None, START),
    ("/streams/events/start_plan.py", None, START),
    ("/streams/hub/descriptions.py", None, START),
    ("/streams/codecs/event_id.py", None, START),
    ("/streams/stream/opening.py", None, START),
    ("/streams/kafka/client.py", None, START),
    ("/streams/kafka/admin.py", None, START),
    ("/streams/stream/reader.py", None, CATCH_UP),
    ("/streams/hub/cache.py", None, CATCH_UP),
    ("/streams/hub/shared_reads.py", None, CATCH_UP),
    ("/streams/hub/arrivals.py", None, CATCH_UP),
    ("/streams/kafka/pipe.py", None, CATCH_UP),
    ("/streams/events/subscription.py", None, CATCH_UP),
    ("/streams/codecs/sse.py", None, CATCH_UP),
    ("/streams/telemetry/", None, BOOKKEEPING),
    ("/streams/edge/metrics.py", None, BOOKKEEPING),
    ("/streams/hub/watchdog.py", None, BOOKKEEPING),
    ("/streams/edge/endpoint.py", ("Registration.",), BOOKKEEPING),
    ("/config/logs.py", None, BOOKKEEPING),
    ("/logging/", None, BOOKKEEPING),
    ("/prometheus_client/", None, BOOKKEEPING),
    # the baseline
    ("/bench/baseline_server.py", ("event",), CATCH_UP),
    ("/bench/baseline_server.py", ("Stream.respond",), WRITE),
    ("/bench/baseline_server.py", ("Stream.",), ACCEPT),
]
# Consulted only when no rule above matched any frame of the stack.
FALLBACK: list[tuple[str, tuple[str, ...] | None, str]] = [
    ("/twisted/", ("FileDescriptor.doWrite", "Connection.writeSomeData", "FileDescriptor.writeSomeData"), WRITE),
    ("/asyncio/selector_events.py", ("_SelectorSocketTransport.write", "_SelectorSocketTransport._write"), WRITE),
    ("/asyncio/selector_events.py", ("BaseSelectorEventLoop._accept", "_SelectorSocketTransport._read"), ACCEPT),
    ("/twisted/", None, ACCEPT),
    ("/daphne/", None, ACCEPT),
]


def frame_phase(rules: list[tuple[str, tuple[str, ...] | None, str]], filename: str, qualname: str) -> str | None:
    for fragment, prefixes, phase in rules:
        if fragment in filename and (prefixes is None or qualname.startswith(prefixes)):
            return phase
    return None


def stack_phase(stack: list[list[str]]) -> str:
    """The phase of one sampled stack (root first): its innermost frame a rule names, above the event loop's
    innermost callback (below it: the server's start-up frames, which every stack has). The loop's own work
    (its selector, its scheduling) is the rest."""
    stack = stack[loop_callback(stack) :]
    for rules in (RULES, FALLBACK):
        for filename, qualname in reversed(stack):
            phase = frame_phase(rules, filename, qualname)
            if phase is not None:
                return phase
    return REST


def loop_callback(stack: list[list[str]]) -> int:
    """Where the event loop's innermost callback starts in a stack (past its end when there is none)."""
    for index in range(len(stack) - 1, -1, -1):
        filename, qualname = stack[index]
        if filename.endswith("/asyncio/events.py") and qualname == "Handle._run":
            return index + 1
    return len(stack)


def split(profile: dict[str, Any]) -> tuple[dict[str, float], dict[str, list[tuple[str, float]]]]:
    """Sampled seconds per phase, and per phase its heaviest innermost frames (outside the stdlib if possible)."""
    seconds = dict.fromkeys(PHASES, 0.0)
    frames: dict[str, dict[str, float]] = {phase: collections.defaultdict(float) for phase in PHASES}
    for stack, weight in profile["stacks"]:
        phase = stack_phase(stack)
        seconds[phase] += weight
        own = next((f for f in reversed(stack) if "/python3." not in f[0] or "site-packages" in f[0]), stack[-1])
        frames[phase][f"{short(own[0])}:{own[1]}"] += weight
    seconds[GC] = profile.get("gc_s", 0.0)
    return seconds, {phase: heaviest(weights) for phase, weights in frames.items()}


def heaviest(weights: dict[str, float], n: int = 8) -> list[tuple[str, float]]:
    return sorted(weights.items(), key=lambda item: item[1], reverse=True)[:n]


def short(filename: str) -> str:
    for marker in ("site-packages/", "/streams/", "/bench/", "/config/", "lib/python3.11/"):
        if marker in filename:
            return ("streams/" if marker == "/streams/" else "") + filename.split(marker, 1)[1]
    return filename


# --------------------------------------------------------------------------
# /proc readings
# --------------------------------------------------------------------------


@dataclass
class Cpu:
    """CPU seconds so far of the process (all its threads), of its main thread and of its children, at a moment.

    From /proc/PID/task/TID/schedstat (nanoseconds), not the stat files' clock ticks: the baseline's open costs
    tens of µs, a few ticks for thousands of streams."""

    at: float
    process: float
    main: float
    children: float

    @classmethod
    def read(cls, pid: int) -> Cpu:
        return cls(
            time.monotonic(),
            harness.process_cpu(pid),
            harness.task_cpu(pid, pid),
            sum(harness.process_cpu(c) for c in harness.children(pid)),
        )


def seconds_over(before: Cpu, after: Cpu, idle: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each part between two readings, less its idle rate over that time."""
    wall = after.at - before.at
    return {
        part: max(0.0, getattr(after, part) - getattr(before, part) - idle[part] * wall)
        for part in ("process", "main", "children")
    }


def idle_rates(pid: int) -> dict[str, float]:
    before = Cpu.read(pid)
    time.sleep(IDLE_S)
    after = Cpu.read(pid)
    wall = after.at - before.at
    return {p: (getattr(after, p) - getattr(before, p)) / wall for p in ("process", "main", "children")}


# --------------------------------------------------------------------------
# One server, one storm
# --------------------------------------------------------------------------


@dataclass
class Storm:
    """One window: N streams resuming at once."""

    sampled: bool
    resumed: int
    failed: int
    all_s: float | None
    cpu_s: dict[str, float]
    idle: dict[str, float]
    route_reloads: int = 0  # route table rebuilds during the window: a change elsewhere on the shared database
    profile: dict[str, Any] | None = None  # the sampler's summary, without the stacks
    phases_s: dict[str, float] = field(default_factory=dict)
    top: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def per_stream_us(self, part: str) -> float:
        return self.cpu_s[part] / max(1, self.resumed) * 1e6


@dataclass
class Target:
    """A server under measurement: the platform's (through a harness Scenario) or the baseline."""

    kind: str  # "platform" or "baseline"
    pid: int
    loadgen: LoadGen
    profile_path: Path
    scenario: Scenario | None = None
    base_fds: int = 0

    def ask(self, command: dict[str, Any], limit_s: float) -> dict[str, Any]:
        if self.scenario is not None:
            return self.scenario.ask(command, limit_s)
        return self.loadgen.ask(command, limit_s)

    def produce(self, count: int) -> None:
        if self.scenario is None:
            return  # the baseline makes its events up
        producer = self.scenario.start_producer(1000, count=count)
        if producer.popen.wait(30) != 0:
            raise BenchError(f"producer failed:\n{producer.tail()}")

    def route_reloads(self) -> int:
        health = self.scenario.health(limit_s=5.0) if self.scenario is not None else None
        value = (health or {}).get("route_reloads", 0)
        return value if isinstance(value, int) else 0

    def settled(self, limit_s: float = 60.0) -> None:
        """Wait until the server has closed the dropped streams: `/-/health` says none is open (the platform's), or
        its descriptors are back to what they were before the first connect (the baseline's)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.scenario is not None:
                health = self.scenario.health(limit_s=2.0)
                if health is not None and health.get("streams") == 0:
                    return
            elif (harness.fd_count(self.pid) or 0) <= self.base_fds + 4:
                return
            time.sleep(0.2)
        raise BenchError(f"{self.kind}: the dropped streams were not closed within {limit_s:.0f}s")


def storm(target: Target, n: int, catch_up: int, sampled: bool) -> Storm:
    target.settled()
    target.produce(catch_up)
    idle = idle_rates(target.pid)
    if sampled:
        with contextlib.suppress(FileNotFoundError):
            target.profile_path.unlink()
        os.kill(target.pid, signal.SIGUSR1)
    reloads = target.route_reloads()
    before = Cpu.read(target.pid)
    reply = target.ask({"cmd": "reconnect", "timeout": 120}, 180)
    time.sleep(TAIL_S)
    after = Cpu.read(target.pid)
    reloads = target.route_reloads() - reloads
    result = Storm(
        sampled=sampled,
        resumed=reply["resumed"],
        failed=reply["failed"],
        all_s=reply["all_seconds"],
        cpu_s=seconds_over(before, after, idle),
        idle=idle,
        route_reloads=reloads,
    )
    if sampled:
        os.kill(target.pid, signal.SIGUSR2)
        profile = read_profile(target.profile_path)
        result.phases_s, result.top = split(profile)
        result.profile = {k: v for k, v in profile.items() if k != "stacks"}
    target.ask({"cmd": "drop"}, 60)
    log(
        f"  {target.kind}{' sampled' if sampled else ''}: {result.resumed}/{n} resumed"
        + (f" in {result.all_s:.2f}s" if result.all_s is not None else f", {result.failed} failed")
        + f", {result.per_stream_us('process'):.0f} µs of CPU per stream"
    )
    return result


def read_profile(path: Path, limit_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists():
            loaded: dict[str, Any] = json.loads(path.read_text())
            return loaded
        time.sleep(0.05)
    raise BenchError(f"the sampler wrote nothing to {path}")


def first_connect(target: Target, n: int, batch: int) -> None:
    target.base_fds = harness.fd_count(target.pid) or 0
    reply = target.ask(
        {"cmd": "connect", "path": path_of(target), "n": n, "batch": batch, "track": True}, 30 + n * 0.02
    )
    if reply["ok"] < n:
        raise BenchError(f"{target.kind}: {reply['ok']}/{n} streams opened: {harness.fmt_errors(reply['errors'])}")
    ready = target.ask({"cmd": "wait_events", "timeout": 30}, 60)
    if ready["waiting"]:
        raise BenchError(f"{target.kind}: {ready['waiting']} streams got no event")
    target.ask({"cmd": "drop"}, 60)


def path_of(target: Target) -> str:
    return target.scenario.path if target.scenario is not None else "/baseline"


def storms(target: Target, args: argparse.Namespace, round_no: int) -> list[Storm]:
    first_connect(target, args.streams, args.batch)
    order = [False, True] if round_no % 2 == 0 else [True, False]
    return [storm(target, args.streams, args.catch_up, sampled) for sampled in order]


def sampler_env(module: str, out: Path, interval_ms: float) -> dict[str, str]:
    return {
        "PYTHONPATH": str(BENCH),  # after the server's checkout (its cwd): only the wrapper comes from here
        "OPEN_COST_MODULE": module,
        "OPEN_COST_OUT": str(out),
        "OPEN_COST_INTERVAL_S": str(interval_ms / 1000),
    }


def run_platform(opts: harness.Options, args: argparse.Namespace, round_no: int) -> list[Storm]:
    out = opts.out_dir / f"open-cost-{opts.run_id}-platform.profile.json"
    sc = Scenario(
        opts,
        f"open-cost-r{round_no}",
        start="historical",
        server_env=sampler_env("streams.server", out, args.interval_ms),
    )
    try:
        sc.open()
        assert sc.server is not None
        target = Target("platform", sc.server.pid, sc.start_loadgen(), out, scenario=sc)
        target.produce(args.history)
        return storms(target, args, round_no)
    finally:
        sc.close()


def run_baseline(opts: harness.Options, args: argparse.Namespace, round_no: int) -> list[Storm]:
    out = opts.out_dir / f"open-cost-{opts.run_id}-baseline.profile.json"
    port = harness.free_port()
    argv = [PY, "-m", "open_cost_sampler", "--port", str(port)]
    argv += ["--history", str(args.history), "--catch-up", str(args.catch_up)]
    env = {**os.environ, **sampler_env("baseline_server", out, args.interval_ms)}
    log_path = opts.out_dir / f"open-cost-{opts.run_id}-baseline-r{round_no}.log"
    server = Proc("baseline", argv, log_path=log_path, env=env)
    loadgen: LoadGen | None = None
    try:
        wait_listening(server, port)
        loadgen = LoadGen(port, opts.out_dir / f"open-cost-{opts.run_id}-baseline-r{round_no}-loadgen.log")
        return storms(Target("baseline", server.pid, loadgen, out), args, round_no)
    finally:
        if loadgen is not None:
            loadgen.stop()
        server.stop()


def wait_listening(server: Proc, port: int, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise BenchError(f"the baseline exited:\n{server.tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise BenchError(f"the baseline did not listen within {limit_s:.0f}s")


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------


@dataclass
class Summary:
    """Medians over rounds of one server's figures, µs of CPU per stream."""

    phases: dict[str, float]
    shares: dict[str, float]
    spread: dict[str, tuple[float, float]]  # least and most µs of each phase over the sampled storms
    main: float
    other_threads: float
    process: float
    process_sampled: float
    children: float
    sampler: float
    all_s: list[float | None]
    samples: int
    route_reloads: int
    coverage: float  # sampled weight / the main thread's CPU over the window
    top: dict[str, list[tuple[str, float]]]


def summarise(storms_: list[Storm]) -> Summary:
    plain = [s for s in storms_ if not s.sampled]
    sampled = [s for s in storms_ if s.sampled]
    main = statistics.median(s.per_stream_us("main") for s in plain)
    process = statistics.median(s.per_stream_us("process") for s in plain)
    shares: dict[str, float] = {}
    spread: dict[str, tuple[float, float]] = {}
    for phase in PHASES:
        each = [s.phases_s[phase] / max(1e-9, sum(s.phases_s.values())) for s in sampled]
        shares[phase] = statistics.median(each)
        spread[phase] = (min(each) * main, max(each) * main)
    tops: dict[str, list[tuple[str, float]]] = {}
    for phase in PHASES:
        top: dict[str, float] = collections.defaultdict(float)
        for s in sampled:
            for name, weight in s.top.get(phase, []):
                top[name] += weight / max(1, s.resumed) * 1e6 / len(sampled)
        tops[phase] = heaviest(top)
    return Summary(
        phases={phase: shares[phase] * main for phase in PHASES},
        shares=shares,
        spread=spread,
        main=main,
        other_threads=process - main,
        process=process,
        process_sampled=statistics.median(s.per_stream_us("process") for s in sampled),
        children=statistics.median(s.per_stream_us("children") for s in plain),
        sampler=statistics.median((s.profile or {}).get("sampler_s", 0.0) / max(1, s.resumed) * 1e6 for s in sampled),
        all_s=[s.all_s for s in storms_],
        samples=sum((s.profile or {}).get("samples", 0) for s in sampled),
        route_reloads=sum(s.route_reloads for s in storms_),
        coverage=statistics.median(
            sum(s.phases_s.values()) / max(1e-9, (s.profile or {}).get("main_thread_cpu_s", 0.0)) for s in sampled
        ),
        top=tops,
    )


def ratio(a: float, b: float | None) -> str:
    return f"{a / b:.1f}x" if b else "-"


def render(platform: Summary, baseline: Summary, args: argparse.Namespace, run_id: str, elapsed: float) -> str:
    lines = [
        f"## The CPU of a stream's open, run {run_id} ({elapsed:.0f} s)",
        "",
        f"{args.streams} streams resuming at once (`Last-Event-ID`, {args.catch_up} events to catch up, 4 partitions, "
        f"1 KiB messages), one server process, {harness.NCPU} cores; {args.rounds} round(s), server and baseline "
        "alternating; medians. µs of CPU per stream: phases are shares of the sampled main thread applied to its "
        "CPU without the sampler.",
        "",
        "| phase | platform µs | share | least-most | baseline µs | platform ÷ baseline |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    baseline_has = {ACCEPT, CATCH_UP, WRITE, REST, GC}
    for phase in PHASES:
        base = baseline.phases[phase] if phase in baseline_has else None
        lines.append(
            f"| {phase} | {platform.phases[phase]:.0f} | {platform.shares[phase] * 100:.1f} % | "
            f"{platform.spread[phase][0]:.0f}-{platform.spread[phase][1]:.0f} | "
            f"{'' if base is None else f'{base:.0f}'} | {ratio(platform.phases[phase], base)} |"
        )
    rows = [
        ("**main thread (event loop), sampler off**", platform.main, baseline.main),
        ("other threads (fetcher's pipe reader, Kafka clients, thread pools)", platform.other_threads, None),
        ("**process, sampler off**", platform.process, baseline.process),
        ("process, sampler on", platform.process_sampled, baseline.process_sampled),
        ("of which the sampler's own handler", platform.sampler, baseline.sampler),
        ("fetch process (the server's child)", platform.children, None),
    ]
    for name, ours, theirs in rows:
        lines.append(f"| {name} | {ours:.0f} | | {'' if theirs is None else f'{theirs:.0f}'} | {ratio(ours, theirs)} |")
    resumed = ", ".join("-" if s is None else f"{s:.2f}" for s in platform.all_s)
    resumed_base = ", ".join("-" if s is None else f"{s:.2f}" for s in baseline.all_s)
    lines += [
        "",
        f"All streams back after (s): platform {resumed}; baseline {resumed_base}. Samples: platform "
        f"{platform.samples}, baseline {baseline.samples}; their weights cover {platform.coverage * 100:.0f} % and "
        f"{baseline.coverage * 100:.0f} % of the main thread's CPU (the rest is the sampler's own handler). Route "
        f"table reloads during the windows: {platform.route_reloads} (route changes by anything else on the shared "
        "database; each one is route-match CPU no stream asked for).",
        "",
    ]
    biggest = sorted(PHASES, key=lambda p: platform.phases[p], reverse=True)[:3]
    for phase in biggest:
        names = "; ".join(f"`{name}` {us:.0f}" for name, us in platform.top[phase][:5])
        lines.append(f"- {phase}: heaviest innermost frames (µs per stream, sampled): {names}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000, help="streams opened at once (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, server and baseline alternating (default 2)")
    parser.add_argument("--app-dir", type=Path, default=harness.ROOT, help="the checkout whose server runs")
    parser.add_argument("--history", type=int, default=8, help="messages on the topic before the first connect")
    parser.add_argument("--catch-up", type=int, default=8, help="messages produced before each storm")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="the sampler's interval, ms of process CPU")
    parser.add_argument("--batch", type=int, default=200, help="connections opened at once in the first connect")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.raise_nofile()
    harness.load_services_env()
    harness.setup_django()
    opts = harness.make_options(
        argparse.Namespace(
            quick=False,
            processes=1,
            server_module="open_cost_sampler",
            server_env=[],
            app_dir=args.app_dir,
            max_broker_connections=3000,
            batch=args.batch,
        )
    )
    log(f"run {opts.run_id}: {args.streams} streams, {args.rounds} round(s), server code from {opts.app_dir}")
    started = time.monotonic()
    results: dict[str, list[Storm]] = {"platform": [], "baseline": []}
    try:
        for round_no in range(args.rounds):
            runs = [("platform", run_platform), ("baseline", run_baseline)]
            for kind, run in runs if round_no % 2 == 0 else runs[::-1]:
                log(f"round {round_no + 1}: {kind}")
                results[kind] += run(opts, args, round_no)
    finally:
        Proc.stop_all()
    platform, baseline = summarise(results["platform"]), summarise(results["baseline"])
    report = render(platform, baseline, args, opts.run_id, time.monotonic() - started)
    print(report, flush=True)
    command = " ".join(["bench/open_cost.py", *(argv if argv is not None else sys.argv[1:])])
    (opts.out_dir / f"open-cost-{opts.run_id}.md").write_text(f"`{command}`\n\n{report}\n")
    raw = {
        "command": command,
        "args": {k: str(v) for k, v in vars(args).items()},
        "storms": {kind: [storm_json(s) for s in storms_] for kind, storms_ in results.items()},
        "summary": {"platform": platform.__dict__, "baseline": baseline.__dict__},
    }
    (opts.out_dir / f"open-cost-{opts.run_id}.json").write_text(json.dumps(raw, indent=1))
    log(f"table and JSON saved under {opts.out_dir}")
    return 0


def storm_json(s: Storm) -> dict[str, Any]:
    return {
        "sampled": s.sampled,
        "resumed": s.resumed,
        "failed": s.failed,
        "all_s": s.all_s,
        "cpu_s": s.cpu_s,
        "idle_per_s": s.idle,
        "route_reloads": s.route_reloads,
        "profile": s.profile,
        "phases_s": s.phases_s,
        "top": s.top,
    }


if __name__ == "__main__":
    sys.exit(main())
