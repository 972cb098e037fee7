"""Memory an idle web process gives back (docs/operations.md, "Memory").

After a load, a process whose streams have all closed still held most of its peak: bench/soak.py measured a worker
at +50-75 % RSS over its baseline minutes after its last client left, for two reasons and no leak:
- streams leave reference cycles (daphne's request and its channel, futures and their callbacks) that only a full
  collection frees; with the start-up heap frozen (streams/server/daphne.py) and little allocated while idle, a full
  collection may wait for minutes;
- what Python frees goes back to glibc's malloc, which keeps it for reuse rather than return it to the kernel: the
  worker's heap stayed at its peak size with most of it free.

So while a process has no stream open, every `SSE_MEMORY_TRIM_S` seconds it runs a full collection, then asks
glibc (`malloc_trim(0)`) to hand its free pages back. Both cost a few milliseconds on an idle process. Where the C
library is not glibc (no `malloc_trim`), only the collection runs. What Python's own small-object allocator keeps
is not glibc's to return; docs/operations.md says what is left and how to avoid it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    with contextlib.suppress(OSError, AttributeError):
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    return None


MALLOC_TRIM = _malloc_trim()


class Reclaimer:
    """Gives memory back while `idle()` holds, every `interval_s` seconds (0: never)."""

    def __init__(self, idle: Callable[[], bool], interval_s: float) -> None:
        self.idle, self.interval_s = idle, interval_s
        self.runs = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Check every `interval_s` from now on, on the running loop (once)."""
        if self._task is None and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memory-reclaim")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if self.idle():
                try:
                    await self.reclaim()
                except Exception:
                    log.exception("memory: reclaiming failed")

    async def reclaim(self) -> None:
        """A full collection, then glibc's free pages back to the kernel (off the loop: it takes the heap's
        locks, not the GIL)."""
        gc.collect()
        if MALLOC_TRIM is not None:
            await asyncio.to_thread(MALLOC_TRIM, 0)
        self.runs += 1
