"""Deltas through the JavaScript client in Debian's Chromium (docs/js-client.md): with `delta: "merge-patch"` the
server sends patches and the client hands the page whole values, exactly the records produced."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page

from bindings.services import do_put_route
from tests.browser.test_client import CLIENT, OPEN_CLIENT, reports, seen
from tests.browser.test_demo import in_browser
from tests.conftest import unique
from tests.e2e.test_deltas import updates
from tests.support.sse_client import EventStream

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("transport", ["eventsource", "fetch"])
def test_the_client_applies_patches_and_hands_the_page_the_records_produced(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], transport: str
) -> None:
    topic, path = new_topic(), "/" + unique("quotes")
    do_put_route(name=path[1:], path=path, topic=topic)
    produced: list[tuple[bytes, dict[str, Any] | None]] = [(b"EURUSD", value) for value in updates()]
    produced += [(b"GBPUSD", {**value, "id": "GBPUSD"}) for value in updates()[:3]]
    produced.insert(4, (b"EURUSD", None))  # a tombstone: the next value of its key goes whole
    for key, value in produced:
        produce(topic, None if value is None else json.dumps(value).encode(), key=key)
    with EventStream(f"{daphne_url}{path}?delta=merge-patch", timeout=20) as raw:
        kinds = [event.event for event in raw.events(len(produced), timeout=20)]
    assert kinds.count("patch") >= 5, kinds  # the server did send patches

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.goto(daphne_url + CLIENT)
        options = {"delta": "merge-patch", "transport": transport}
        page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": path, "options": options, "tokenFromTest": False})
        page.wait_for_function(seen("message", len(produced) - 1), timeout=15_000)
        return reports(page)

    events = [e for e in in_browser(scenario) if e["type"] in ("message", "delete")]
    assert [json.loads(e["data"]) if e["type"] == "message" else None for e in events] == [v for _, v in produced]
