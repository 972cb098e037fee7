"""The heap census (bench/census_probe.py) keeps nothing it looked at: what it counts must be what the server
holds, not what the census itself kept alive."""

from __future__ import annotations

import gc
import signal
import tracemalloc
import weakref
from pathlib import Path

import pytest

from bench import census_probe


class Held:
    """Objects whose holders a census lists."""


def test_a_census_keeps_nothing_it_looked_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(census_probe, "OUT", tmp_path)
    monkeypatch.setattr(census_probe, "HOLDERS", [f"{Held.__module__}.{Held.__qualname__}"])
    # Held by this frame alone, which no census lists: the last holder the census looks at is one of its own lists.
    first, second = Held(), Held()
    watched = [weakref.ref(first), weakref.ref(second)]
    tracemalloc.start(1)
    try:
        census_probe.Census().take(signal.SIGUSR1, None)
    finally:
        tracemalloc.stop()
        gc.unfreeze()  # the census freezes what it leaves
    assert (tmp_path / "census-0.done").exists()
    del first, second
    # Gone by reference counting, with no collection: the census left no cycle holding them.
    assert [ref() for ref in watched] == [None, None]
