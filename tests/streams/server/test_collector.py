"""The collector's tuning (streams/server/collector.py): what a full pass keeps is frozen at once, so the next
full pass does not scan it again; a cycle that becomes garbage among frozen objects is reclaimed by the
periodic review; young passes freeze nothing, but during a burst of requests, for a bounded time between
two reviews.

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

def burst():
    for _ in range(collector.BURST_REQUESTS):
        collector.request_started()

def frozen_by_a_young_pass(kept):  # how many objects a young pass froze, with 1 000 more in `kept` before it
    before = gc.get_freeze_count()
    kept.extend(Node() for _ in range(1000))
    gc.collect(0)
    return gc.get_freeze_count() - before
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
        found["callbacks"] = gc.callbacks.count(collector.freeze_after_pass)
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


def test_during_a_burst_of_connections_young_passes_freeze_what_they_keep() -> None:
    found = run("""
        gc.collect()
        for _ in range(collector.BURST_REQUESTS - 1):
            collector.request_started()
        found["before"] = collector.bursting()
        kept = []
        found["not_yet"] = frozen_by_a_young_pass(kept)
        collector.request_started()
        found["burst"] = collector.bursting()
        found["grown"] = frozen_by_a_young_pass(kept)
    """)
    assert found["before"] is False
    assert found["not_yet"] == 0
    assert found["burst"] is True
    assert found["grown"] >= 2000  # both lists: what the first young pass kept had waited in the middle generation


def test_a_burst_ends_a_window_after_its_last_connection_and_slow_connections_make_none() -> None:
    found = run("""
        import time
        collector.BURST_WINDOW_S = 0.3
        burst()
        found["burst"] = collector.bursting()
        time.sleep(0.4)
        found["after"] = collector.bursting()
        gc.collect()
        found["grown"] = frozen_by_a_young_pass([])
        for _ in range(3):  # a window's worth of connections spread over more than a window
            for _ in range(collector.BURST_REQUESTS // 2):
                collector.request_started()
            time.sleep(0.31)
        found["spread"] = collector.bursting()
    """)
    assert found["burst"] is True
    assert found["after"] is False
    assert found["grown"] == 0
    assert found["spread"] is False


def test_bursts_freeze_for_a_bounded_time_between_two_reviews() -> None:
    found = run("""
        import time
        collector.BURST_FREEZING_S = 0.3
        kept = []
        burst()
        found["first"] = frozen_by_a_young_pass(kept)
        time.sleep(0.4)
        burst()
        found["past_budget"] = frozen_by_a_young_pass(kept)
        collector.review()
        burst()
        found["reviewed"] = frozen_by_a_young_pass(kept)
    """)
    assert found["first"] >= 1000
    assert found["past_budget"] == 0
    assert found["reviewed"] >= 1000


def test_each_request_the_server_begins_counts_towards_a_burst() -> None:
    found = run("""
        import django
        django.setup()
        from streams.server.daphne import FlowControlServer
        server = FlowControlServer.__new__(FlowControlServer)  # nothing but its record of requests: no listening
        server.connections = {}
        for request in range(collector.BURST_REQUESTS):
            server.protocol_connected(request)
        found["burst"] = collector.bursting()
    """)
    assert found["burst"] is True
