"""A heap census wrapped around a server process (bench/stream_census.py).

    PYTHONPATH=bench CENSUS_MODULE=streams.server CENSUS_OUT=/tmp/census \\
        python -m census_probe -e tcp:port=8000 config.asgi:application

It runs `CENSUS_MODULE` (default `streams.server`) as `__main__` with the same arguments. SIGUSR2 starts
`tracemalloc` (`CENSUS_FRAMES` frames per allocation, default 30): started with the process, it made the server's
start (Django, Twisted) too slow for the harness, and what a census compares is allocated later anyway. Each
SIGUSR1 then writes a census to `CENSUS_OUT`/census-<n>.*, n counting from 0:

- `.snapshot`: `tracemalloc`'s snapshot (`Snapshot.dump`), every live block with where it was allocated;
- `.json`: the objects the garbage collector tracks (containers: instances, dicts, lists, coroutines, futures...),
  counted by type with their shallow sizes (`sys.getsizeof`), and the process's RSS; with `CENSUS_HOLDERS` (type
  names), what refers to a few objects of each of those types, by type; then `.done`, once both are written.

The handler runs in the main thread (the event loop's) between two bytecodes, so the census sees the streams as
they stand. Nothing is collected first: what the process holds is what it holds. Tracing allocations slows the
server and grows its memory; the census counts what the traced heap holds, the RSS beside it is the probe's.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

FRAMES = int(os.environ.get("CENSUS_FRAMES", "30"))
MODULE = os.environ.get("CENSUS_MODULE", "streams.server")
# Types (module.qualname, comma-separated) whose holders a census lists: what refers to up to `SAMPLES` of them.
HOLDERS = [name for name in os.environ.get("CENSUS_HOLDERS", "").split(",") if name]
SAMPLES = 20
OUT = Path(os.environ.get("CENSUS_OUT", "census"))


def type_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def holder_kind(holder: object) -> str:
    """A holder's type; for an instance's attributes (a dict), whose they are. A function of its own: a
    comprehension in `Census.take` reading the loop's `holder` made it a closure cell of that frame, which the
    census's list of every object then held, and which held the list in turn whenever the last holder looked at
    was that list. The cycle was frozen with everything else, and kept every object of the census, closed
    streams included, until the collector's next review."""
    kind = type_name(type(holder))
    if isinstance(holder, dict):
        owners = [o for o in gc.get_referrers(holder) if getattr(o, "__dict__", None) is holder]
        kind = f"dict of {type_name(type(owners[0]))}" if owners else kind
    return kind


class Census:
    def __init__(self) -> None:
        self.taken = 0

    def take(self, signum: int, frame: FrameType | None) -> None:
        base = OUT / f"census-{self.taken}"
        self.taken += 1
        snapshot = tracemalloc.take_snapshot()
        counts: dict[str, list[int]] = {}
        # Frozen objects (streams/server/collector.py freezes what passes keep) are in no generation that
        # `get_objects` (or `get_referrers`) walks: thawed for the census, then everything is frozen again.
        gc.unfreeze()
        objects = gc.get_objects()
        for obj in objects:
            entry = counts.setdefault(type_name(type(obj)), [0, 0])
            entry[0] += 1
            entry[1] += sys.getsizeof(obj)
        holders: dict[str, dict[str, int]] = {}
        for name in HOLDERS:
            found = [obj for obj in objects if type_name(type(obj)) == name][:SAMPLES]
            kinds = holders[name] = {}
            for obj in found:
                for holder in gc.get_referrers(obj):
                    if holder is objects or holder is found:
                        continue
                    kind = holder_kind(holder)
                    kinds[kind] = kinds.get(kind, 0) + 1
            del found
        del objects
        gc.freeze()  # after the holders: `get_referrers` does not look among frozen objects
        snapshot.dump(str(base) + ".snapshot")
        traced, peak = tracemalloc.get_traced_memory()
        body = {"types": counts, "holders": holders, "rss_kib": rss_kib(), "traced": traced, "traced_peak": peak}
        Path(str(base) + ".json").write_text(json.dumps(body))
        Path(str(base) + ".done").write_text("")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGUSR1, Census().take)
    signal.signal(signal.SIGUSR2, lambda _signum, _frame: tracemalloc.start(FRAMES))
    sys.argv[0] = MODULE
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
