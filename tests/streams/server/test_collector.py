"""The collector's tuning (streams/server/collector.py): what a full pass keeps is frozen at once, so the next
full pass does not scan it again; a cycle that becomes garbage among frozen objects is reclaimed by the
periodic review; young passes freeze nothing.

Each check runs in a process of its own: freezing and unfreezing the test process's heap would move its garbage
(a connection some earlier test left in a cycle) into whichever test collects next."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from tests.support.servers import ROOT

PRELUDE = """
import gc, json, weakref
from streams.server import collector

class Node:
    other = None

collector.tune()
found = {}
"""


def run(body: str) -> dict[str, Any]:
    """Run `body` after the prelude in a fresh interpreter; it fills `found`, printed back as JSON."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(found))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_full_pass_freezes_what_it_keeps() -> None:
    found = run("""
        kept = [Node() for _ in range(1000)]
        before = gc.get_freeze_count()
        gc.collect()
        found["grown"] = gc.get_freeze_count() - before
    """)
    assert found["grown"] >= 1000


def test_young_passes_freeze_nothing() -> None:
    found = run("""
        gc.collect()
        before = gc.get_freeze_count()
        kept = [Node() for _ in range(1000)]
        gc.collect(0)
        gc.collect(1)
        found["grown"] = gc.get_freeze_count() - before
    """)
    assert found["grown"] == 0


def test_a_cycle_that_became_garbage_while_frozen_goes_at_the_review() -> None:
    found = run("""
        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        gc.collect()  # both kept, and frozen
        del first, second  # now a cycle of garbage, out of the collector's sight
        gc.collect()
        found["after_full_pass"] = gone() is not None
        found["reviewed"] = collector.review()
        found["after_review"] = gone() is not None
        found["frozen_again"] = gc.get_freeze_count()
    """)
    assert found["after_full_pass"] is True
    assert found["reviewed"] >= 2
    assert found["after_review"] is False
    assert found["frozen_again"] > 0


def test_tuning_twice_installs_one_callback() -> None:
    found = run("""
        collector.tune()
        found["callbacks"] = gc.callbacks.count(collector.freeze_after_full_pass)
    """)
    assert found["callbacks"] == 1


def test_the_frozen_count_is_counted_at_start_and_at_each_review_only() -> None:
    """Counting frozen objects walks all of them: `/-/health` reports the count taken at start and at each review,
    and a full pass in between (which freezes more) does not make anyone count again."""
    found = run("""
        found["at_start"] = collector.frozen_objects() == gc.get_freeze_count()
        kept = [Node() for _ in range(1000)]
        gc.collect()
        found["between"] = gc.get_freeze_count() - collector.frozen_objects()
        collector.review()
        found["reviewed"] = collector.frozen_objects() == gc.get_freeze_count()
    """)
    assert found["at_start"] is True
    assert found["between"] >= 1000
    assert found["reviewed"] is True
