"""The cyclic garbage collector, tuned for a process whose objects mostly live as long as their streams.

A stream's objects become long-lived the moment it opens, and Python's collector scans every long-lived object
again at each full pass: while a reconnect storm opens thousands of streams, each full pass scans all the
streams opened so far, and the passes took 40-55 % of an open's CPU (bench/open_cost.py). An ended stream
leaves nothing in reference cycles (tests/streams/server/test_cyclic_garbage.py): its objects go by reference
counting, frozen or not. So what a full pass keeps is frozen at once (`gc.freeze()`, which moves lists and costs
nothing), and the next pass scans only what was allocated since: each object is scanned by at most one full pass.

What is frozen is never collected as cyclic garbage. Once every `REVIEW_EVERY_S` everything is unfrozen for one
full pass, which reclaims any cycle that became garbage after its objects were frozen, and frozen again.
"""

from __future__ import annotations

import gc
from typing import Any

FULL_COLLECTION_EVERY = 100  # second-generation collections per full one (Python's default: 10)
REVIEW_EVERY_S = 600.0
OLDEST = 2  # the generation a full pass collects

# Objects frozen, as last counted: counting walks every one of them (millions in a busy process: 40 µs per stream
# of a reconnect storm's CPU went to `/-/health` calls counting them), so it is done at start and at each review.
_frozen_counted = 0


def tune() -> None:
    """Freeze what is loaded by now, let full passes wait longer, and freeze what each full pass keeps."""
    global _frozen_counted  # noqa: PLW0603  (the process's one collector)
    gc.freeze()
    _frozen_counted = gc.get_freeze_count()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    if freeze_after_full_pass not in gc.callbacks:
        gc.callbacks.append(freeze_after_full_pass)


def freeze_after_full_pass(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == OLDEST:
        gc.freeze()


def review() -> int:
    """One full pass over everything, frozen objects included; what it keeps is frozen again. Returns what it
    collected."""
    global _frozen_counted  # noqa: PLW0603
    gc.unfreeze()
    collected = gc.collect()  # freeze_after_full_pass freezes the survivors
    _frozen_counted = gc.get_freeze_count()
    return collected


def frozen_objects() -> int:
    """Objects frozen when last counted (at start, and at each review)."""
    return _frozen_counted
