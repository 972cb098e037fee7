"""The server (`python -m streams.server`) with a probe of its cyclic garbage and its asyncio tasks, for tests.

    GC_PROBE_OUT=/tmp/garbage.json python -m tests.support.gc_probe <daphne's arguments>

On SIGUSR1 it unfreezes the heap (streams/server/collector.py freezes what it keeps, out of a collection's
sight) and runs a full collection that keeps what it finds (`gc.DEBUG_SAVEALL`) and writes, to
`GC_PROBE_OUT`, how many objects it found and how many of each type, then frees them. Objects that only the
collector frees are those in reference cycles: a stream that leaves some behind each time it ends makes every
full collection longer and the process's memory wait for it. It writes how many asyncio tasks are pending too
(a stream runs in its request's task, and starts none: streams/edge/race.py).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType

OUT = Path(os.environ.get("GC_PROBE_OUT", "gc-probe.json"))


def type_name(found: object) -> str:
    kind = type(found)
    return f"{kind.__module__}.{kind.__qualname__}"


def pending_tasks() -> int:
    """The event loop's pending tasks (the handler runs on the loop's thread, between two of its steps)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return 0
    return len(asyncio.all_tasks(loop))


def probe(_signum: int, _frame: FrameType | None) -> None:
    tasks = pending_tasks()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.unfreeze()
    try:
        collected = gc.collect()
        types = collections.Counter(type_name(found) for found in gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    partial = OUT.with_name("." + OUT.name)
    partial.write_text(json.dumps({"collected": collected, "types": dict(types), "tasks": tasks}))
    partial.rename(OUT)  # whole or absent, for the test that waits for it


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, probe)
    sys.argv[0] = "streams.server"
    runpy.run_module("streams.server", run_name="__main__", alter_sys=True)
