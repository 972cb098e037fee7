"""The cyclic garbage collector, tuned for a process whose objects mostly live as long as their streams.

A stream's objects become long-lived the moment it opens, and Python's collector scans every long-lived object
again at each full pass: while a reconnect storm opens thousands of streams, each full pass scans all the
streams opened so far, and the passes took 40-55 % of an open's CPU (bench/open_cost.py). An ended stream
leaves nothing in reference cycles (tests/streams/server/test_cyclic_garbage.py): its objects go by reference
counting, frozen or not. So what a full pass keeps is frozen at once (`gc.freeze()`, which moves lists and costs
nothing), and the next pass scans only what was allocated since: each object is scanned by at most one full pass.

Even so an object kept is scanned three times, by a young pass, a middle one and a full one, before it is frozen:
a fifth of an open's CPU in a storm. During a burst of requests (`BURST_REQUESTS` begun within
`BURST_WINDOW_S`, told by `request_started`) what every pass keeps is frozen, so a stream's objects are
scanned once. A request that is not a stream does leave cycles (Django's request handling: about a hundred
objects per API request); those that a young pass saw alive are frozen with the rest during a burst, and wait
for the next review. So passes freeze during bursts for at most `BURST_FREEZING_S` between two reviews: a storm
is over by then, and what waits for the review is bounded by that time's requests even when the bursts go on.

What is frozen is never collected as cyclic garbage. Once every `REVIEW_EVERY_S` everything is unfrozen for one
full pass, which reclaims any cycle that became garbage after its objects were frozen, and frozen again. It is
a pause of the event loop that grows with the heap: 0.58 s for 809 000 objects with 5 000 streams open.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

FULL_COLLECTION_EVERY = 100  # second-generation collections per full one (Python's default: 10)
REVIEW_EVERY_S = 600.0
BURST_FREEZING_S = 30.0  # how long passes may freeze during bursts between two reviews
BURST_REQUESTS = 100  # requests begun within one window that make a burst...
BURST_WINDOW_S = 1.0  # ...and how long a burst lasts after its last request
OLDEST = 2  # the generation a full pass collects

# Objects frozen, as last counted: counting walks every one of them (millions in a busy process: 40 µs per stream
# of a reconnect storm's CPU went to `/-/health` calls counting them), so it is done at start and at each review.
_frozen_counted = 0
_window_start = float("-inf")  # when the current window of requests began
_window_count = 0  # requests begun in it
_burst_until = float("-inf")  # every pass freezes what it keeps until then
_burst_froze_at: float | None = None  # when a pass first froze during a burst since the last review


def tune() -> None:
    """Freeze what is loaded by now, let full passes wait longer, and freeze what each full pass keeps."""
    global _frozen_counted  # noqa: PLW0603  (the process's one collector)
    gc.freeze()
    _frozen_counted = gc.get_freeze_count()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    if freeze_after_pass not in gc.callbacks:
        gc.callbacks.append(freeze_after_pass)


def request_started() -> None:
    """Count a request; `BURST_REQUESTS` of them within `BURST_WINDOW_S` start (or extend) a burst."""
    global _window_start, _window_count, _burst_until  # noqa: PLW0603
    now = time.monotonic()
    if now - _window_start >= BURST_WINDOW_S:
        _window_start, _window_count = now, 0
    _window_count += 1
    if _window_count >= BURST_REQUESTS:
        _burst_until = now + BURST_WINDOW_S


def bursting() -> bool:
    return time.monotonic() < _burst_until


def freeze_after_pass(phase: str, info: dict[str, Any]) -> None:
    """What a full pass keeps is frozen; during a burst, what any pass keeps, for `BURST_FREEZING_S` at most
    between two reviews."""
    global _burst_froze_at  # noqa: PLW0603
    if phase != "stop":
        return
    if info["generation"] == OLDEST:
        gc.freeze()
        return
    now = time.monotonic()
    if now < _burst_until:
        if _burst_froze_at is None:
            _burst_froze_at = now
        if now - _burst_froze_at < BURST_FREEZING_S:
            gc.freeze()


def review() -> int:
    """One full pass over everything, frozen objects included; what it keeps is frozen again. Returns what it
    collected."""
    global _frozen_counted, _burst_froze_at  # noqa: PLW0603
    started = time.monotonic()
    gc.unfreeze()
    collected = gc.collect()  # freeze_after_pass freezes the survivors
    _frozen_counted = gc.get_freeze_count()
    _burst_froze_at = None
    log.info(
        "collector: reviewed %d objects in %.0f ms, %d collected",
        _frozen_counted,
        (time.monotonic() - started) * 1000,
        collected,
    )
    return collected


def frozen_objects() -> int:
    """Objects frozen when last counted (at start, and at each review)."""
    return _frozen_counted
