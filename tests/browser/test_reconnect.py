"""The demo page's EventSource across a server restart, in Debian's Chromium driven by Playwright.

The server goes away under the open stream and comes back on the same port; the browser reconnects by itself
after the stream's `retry:` delay and sends Last-Event-ID, so the page ends up with every message exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Request

from bindings.services import do_put_route
from tests.browser.test_demo import in_browser
from tests.conftest import unique
from tests.support.servers import DaphneServer, free_port, start_daphne

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PARTITIONS = 2
ALL_SHOWN = "(n) => window.received.filter((e) => e.type === 'message').length >= n"


def test_event_source_reconnects_after_the_server_drops_and_shows_every_message_once(
    new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    do_put_route(name="demo-items", path="/items", topic=topic)
    run = unique("run")
    sent: list[dict[str, Any]] = []
    offsets: dict[int, tuple[int, int]] = {}

    def send(n: int) -> None:
        message = {"run": run, "n": n, "partition": n % PARTITIONS}
        offsets[n] = produce(topic, json.dumps(message).encode(), partition=message["partition"])
        sent.append(message)

    port = free_port()
    servers: list[DaphneServer] = [start_daphne({}, port, log_name="test-daphne-reconnect-1")]

    def scenario(page: Page) -> tuple[list[dict[str, str]], list[str | None]]:
        streams: list[Request] = []
        page.on("request", lambda request: streams.append(request) if request.url.endswith("/items") else None)
        page.goto(servers[0].url + "/")
        page.wait_for_function("document.getElementById('state').textContent === 'open'", timeout=10_000)
        for n in range(3):
            send(n)
        page.wait_for_function(ALL_SHOWN, arg=3, timeout=10_000)

        servers[0].stop()  # the server drops the stream
        page.wait_for_function("document.getElementById('state').textContent === 'reconnecting'", timeout=10_000)
        for n in range(3, 6):
            send(n)
        servers.append(start_daphne({}, port, log_name="test-daphne-reconnect-2"))

        page.wait_for_function(ALL_SHOWN, arg=6, timeout=20_000)
        # A replayed duplicate would come before anything new of its partition: a sentinel on each partition
        # bounds the wait for one.
        for n in range(6, 6 + PARTITIONS):
            send(n)
        page.wait_for_function(ALL_SHOWN, arg=6 + PARTITIONS, timeout=10_000)
        received: list[dict[str, str]] = page.evaluate("window.received")
        # Attempts refused while the server was down never got their final headers: only answered ones count.
        answered = [request.all_headers().get("last-event-id") for request in streams if request.response()]
        return received, answered

    try:
        received, resumed_from = in_browser(scenario)
    finally:
        for server in servers:
            server.stop()

    story = json.dumps({"received": received, "offsets": offsets, "last_event_ids": resumed_from}, indent=1)
    messages = [json.loads(event["data"]) for event in received if event["type"] == "message"]
    assert sorted(messages, key=lambda m: m["n"]) == sent, story  # every message, each once
    for partition in range(PARTITIONS):
        in_partition = [m["n"] for m in messages if m["partition"] == partition]
        assert in_partition == [m["n"] for m in sent if m["partition"] == partition], story
    # Exactly two streams: a fresh one, then one resuming from the last event shown before the drop.
    assert resumed_from == [None, received[2]["id"]], story
