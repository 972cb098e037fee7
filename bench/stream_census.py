"""What one held idle stream keeps in a web worker: a heap census per stream, and what is given back at close.

    .venv/bin/python bench/stream_census.py                           # 2 000 streams, this checkout (~1 min)
    .venv/bin/python bench/stream_census.py --streams 4000 --app-dir /other/checkout

One server process (`python -m streams.server`, started through bench/harness.py on a fresh topic with a quiet
`live` route) runs inside bench/census_probe.py, which traces every allocation (`tracemalloc`) and, on a
signal, writes a census: the traced heap and the collector's objects by type. The load generator
(bench/loadgen.py) then:

1. opens 100 streams and drops them, so that what the process loads once (the route, the topic's state, the
   hub) is loaded; once the server says no stream is open, census **A**;
2. opens `--streams` streams and holds them, idle (no message is produced); census **B**;
3. drops them all; once the server has closed them, census **C**;
4. opens as many again, census **D** (the second round, on a process that held and let go of the first).

Printed: per stream, B - A as the traced heap grouped by **where** it was allocated (the innermost frame of this
checkout's code, else of daphne, else of Twisted, else the innermost frame), then by the innermost line, then the
collector's objects by type (count and shallow bytes per stream); the RSS per stream beside the traced bytes
(the difference is the allocator's overhead and what is not traced); C - A, what a closed stream left; and D - C
per stream. The table goes to stdout and to var/bench/census-<run>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: bench/ is on sys.path, the checkout holding it is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.harness import BENCH, BenchError, Proc, Scenario, log

WARM = 100
SETTLE_S = 3.0
OWNERS = ("/streams/", "/config/", "/bindings/")  # this checkout's code, as a frame's file names it
LIBRARIES = ("/daphne/", "/twisted/", "/asyncio/")


def short(filename: str, app_dir: Path) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1]
    if filename.startswith(str(app_dir)):
        return filename[len(str(app_dir)) + 1 :]
    if "/lib/python3" in filename:
        return filename.split("/lib/", 1)[1].split("/", 1)[1]
    return filename


def owner(traceback: tracemalloc.Traceback, app_dir: Path) -> str:
    """The innermost frame of this checkout's code, else of daphne, Twisted or asyncio, else the innermost."""
    frames = list(traceback)[::-1]  # innermost first
    for names in (OWNERS, *((name,) for name in LIBRARIES)):
        for frame in frames:
            if any(name in frame.filename for name in names) and "census_probe" not in frame.filename:
                return f"{short(frame.filename, app_dir)}:{frame.lineno}"
    return f"{short(frames[0].filename, app_dir)}:{frames[0].lineno}" if frames else "?"


def group(snapshot: tracemalloc.Snapshot, app_dir: Path) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Bytes by owner, blocks by owner, bytes by innermost line."""
    by_owner: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    cache: dict[tracemalloc.Traceback, tuple[str, str]] = {}
    for trace in snapshot.traces:
        tb = trace.traceback
        keys = cache.get(tb)
        if keys is None:
            inner = tb[-1] if len(tb) else None
            line = f"{short(inner.filename, app_dir)}:{inner.lineno}" if inner is not None else "?"
            keys = cache[tb] = (owner(tb, app_dir), line)
        by_owner[keys[0]] += trace.size
        blocks[keys[0]] += 1
        by_line[keys[1]] += trace.size
    return by_owner, blocks, by_line


class Probe:
    """The server's censuses, asked for by signal."""

    def __init__(self, out: Path, pid: int) -> None:
        self.out, self.pid, self.taken = out, pid, 0

    def take(self) -> tuple[tracemalloc.Snapshot, dict[str, Any]]:
        base = self.out / f"census-{self.taken}"
        self.taken += 1
        os.kill(self.pid, 10)  # SIGUSR1
        deadline = time.monotonic() + 120
        while not Path(str(base) + ".done").exists():
            if time.monotonic() > deadline:
                raise BenchError(f"no census at {base}")
            time.sleep(0.2)
        body = json.loads(Path(str(base) + ".json").read_text())
        return tracemalloc.Snapshot.load(str(base) + ".snapshot"), body


def wait_streams(sc: Scenario, count: int, limit_s: float = 60.0) -> None:
    """Until the server has `count` streams open; with none, until it has forgotten their requests too (daphne's
    table of connections holds only the `/-/health` request asking)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        health = sc.health()
        if health is not None and health.get("streams") == count and (count or health["server_connections"] <= 1):
            return
        time.sleep(0.25)
    raise BenchError(f"the server did not get to {count} open streams within {limit_s:.0f} s: {sc.health()}")


def diff(after: Counter[str], before: Counter[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for key in after.keys() | before.keys():
        out[key] = after.get(key, 0) - before.get(key, 0)
    return out


def table(title: str, rows: Sequence[tuple[str, ...]], head: tuple[str, ...]) -> list[str]:
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def types_diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, tuple[int, int]]:
    out = {}
    for name in after["types"].keys() | before["types"].keys():
        count = after["types"].get(name, [0, 0])[0] - before["types"].get(name, [0, 0])[0]
        size = after["types"].get(name, [0, 0])[1] - before["types"].get(name, [0, 0])[1]
        if count or size:
            out[name] = (count, size)
    return out


def report(
    app_dir: Path, n: int, second: int, censuses: list[tuple[tracemalloc.Snapshot, dict[str, Any]]], top: int
) -> str:
    (snap_a, body_a), (snap_b, body_b), (snap_c, body_c), (snap_d, body_d) = censuses
    owners_a, blocks_a, lines_a = group(snap_a, app_dir)
    owners_b, blocks_b, lines_b = group(snap_b, app_dir)
    owners_c, _, _ = group(snap_c, app_dir)
    owners_d, _, _ = group(snap_d, app_dir)
    held, held_blocks, held_lines = diff(owners_b, owners_a), diff(blocks_b, blocks_a), diff(lines_b, lines_a)
    traced = sum(held.values())
    lines = [
        f"Server code: {app_dir}. {n} idle streams (census B - A), per stream:",
        "",
        f"- traced heap: {traced / n:.0f} B in {sum(held_blocks.values()) / n:.1f} blocks",
        f"- RSS (with the probe's tracing): {(body_b['rss_kib'] - body_a['rss_kib']) * 1024 / n:.0f} B",
        f"- after all {n} closed (C - A), traced heap left: {sum(diff(owners_c, owners_a).values()) / n:.0f} B per "
        f"stream that was open; RSS {(body_c['rss_kib'] - body_a['rss_kib']) * 1024 / n:.0f} B",
        f"- second round of {second} (D - C), traced heap: {sum(diff(owners_d, owners_c).values()) / second:.0f} B "
        f"per stream; RSS {(body_d['rss_kib'] - body_c['rss_kib']) * 1024 / second:.0f} B",
        "",
    ]
    rows: list[tuple[str, ...]] = [
        (where, f"{size / n:.0f}", f"{held_blocks[where] / n:.2f}")
        for where, size in held.most_common(top)
        if size / n >= 1
    ]
    lines += table("Traced heap per stream, by where it was allocated", rows, ("where", "bytes", "blocks"))
    rows = [(where, f"{size / n:.0f}") for where, size in held_lines.most_common(top) if size / n >= 1]
    lines += table("Traced heap per stream, by innermost line", rows, ("line", "bytes"))
    kinds = types_diff(body_b, body_a)
    ranked = sorted(kinds.items(), key=lambda item: -item[1][1])[:top]
    rows = [(name, f"{count / n:.2f}", f"{size / n:.0f}") for name, (count, size) in ranked if abs(count / n) >= 0.01]
    lines += table("Objects the collector tracks, per stream (shallow sizes)", rows, ("type", "objects", "bytes"))
    for label, body in (("B", body_b), ("C", body_c)):
        for name, kinds in body.get("holders", {}).items():
            if kinds:
                said = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items(), key=lambda kc: -kc[1]))
                lines += [f"- census {label}: what holds a sample of `{name}`: {said}", ""]
    left = diff(owners_c, owners_a)
    rows = [(where, f"{size / n:.0f}") for where, size in left.most_common(10) if size / n >= 1]
    if rows:
        lines += table("Left after close (C - A), per stream that was open", rows, ("where", "bytes"))
    return "\n".join(lines)


def run(opts: harness.Options, args: argparse.Namespace) -> str:
    out = opts.out_dir / f"census-{opts.run_id}"
    env = {
        "PYTHONPATH": str(BENCH),
        "CENSUS_MODULE": "streams.server",
        "CENSUS_OUT": str(out),
        "CENSUS_FRAMES": str(args.frames),
        "CENSUS_HOLDERS": args.holders,
    }
    sc = Scenario(opts, "census", start="live", server_env=env)
    try:
        sc.open()
        sc.guard()
        assert sc.server is not None
        probe = Probe(out, sc.server.pid)
        os.kill(sc.server.pid, 12)  # SIGUSR2: tracing starts
        sc.start_loadgen()
        budget = 120 + args.streams * 0.1  # a traced server opens streams several times slower

        def connect(count: int) -> None:
            reply = sc.ask({"cmd": "connect", "path": sc.path, "n": count, "batch": opts.batch, "timeout": 30}, budget)
            if reply["ok"] < count:
                raise BenchError(f"{reply['ok']}/{count} streams opened: {harness.fmt_errors(reply.get('errors', {}))}")
            wait_streams(sc, count)
            time.sleep(SETTLE_S)

        def drop() -> None:
            sc.ask({"cmd": "drop"}, 60)
            wait_streams(sc, 0)
            time.sleep(SETTLE_S)

        connect(WARM)
        drop()
        censuses = [probe.take()]
        log("census A taken")
        connect(args.streams)
        censuses.append(probe.take())
        log("census B taken")
        drop()
        censuses.append(probe.take())
        log("census C taken")
        connect(args.streams)
        censuses.append(probe.take())
        log("census D taken")
        return report(opts.app_dir, args.streams, args.streams, censuses, args.top)
    finally:
        sc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000, help="idle streams held (default 2000)")
    parser.add_argument("--app-dir", type=Path, default=harness.ROOT, help="the checkout whose server runs")
    parser.add_argument("--frames", type=int, default=12, help="frames kept per traced allocation (default 12)")
    parser.add_argument(
        "--holders",
        default="streams.server.bodies.BoundedRequest,streams.server.daphne.Flow",
        help="types (module.qualname, comma-separated) whose holders each census lists",
    )
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("--batch", type=int, default=200, help="connections opened at once")
    args = parser.parse_args(argv)
    harness.raise_nofile()
    harness.load_services_env()
    harness.setup_django()
    opts = harness.make_options(
        argparse.Namespace(
            quick=False,
            processes=1,
            server_module="census_probe",
            server_env=[],
            app_dir=args.app_dir,
            max_broker_connections=3000,
            batch=args.batch,
        )
    )
    try:
        text = run(opts, args)
    finally:
        Proc.stop_all()
    print(text, flush=True)
    command = " ".join(["bench/stream_census.py", *(argv if argv is not None else sys.argv[1:])])
    (opts.out_dir / f"census-{opts.run_id}.md").write_text(f"`{command}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
