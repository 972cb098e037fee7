"""The collector's tuning (streams/server/collector.py): what a full pass keeps is frozen at once, so the next
full pass does not scan it again; a cycle that becomes garbage among frozen objects is reclaimed by the
periodic review; young passes freeze nothing."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streams.server import collector


@pytest.fixture
def tuned() -> Iterator[None]:
    thresholds = gc.get_threshold()
    collector.tune()
    yield
    gc.callbacks.remove(collector.freeze_after_full_pass)
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_a_full_pass_freezes_what_it_keeps(tuned: None) -> None:
    kept = [Node() for _ in range(1000)]
    before = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() >= before + len(kept)


def test_young_passes_freeze_nothing(tuned: None) -> None:
    gc.collect()
    before = gc.get_freeze_count()
    kept = [Node() for _ in range(1000)]
    gc.collect(0)
    gc.collect(1)
    assert gc.get_freeze_count() == before
    assert kept


def test_a_cycle_that_became_garbage_while_frozen_goes_at_the_review(tuned: None) -> None:
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    gc.collect()  # both kept, and frozen
    del first, second  # now a cycle of garbage, out of the collector's sight
    gc.collect()
    assert gone() is not None
    assert collector.review() >= 2
    assert gone() is None
    assert gc.get_freeze_count() > 0  # what the review kept is frozen again


def test_tuning_twice_installs_one_callback(tuned: None) -> None:
    collector.tune()
    assert gc.callbacks.count(collector.freeze_after_full_pass) == 1
