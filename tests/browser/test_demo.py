"""The demo page in Debian's Chromium, driven by Playwright.

Playwright's sync API keeps an event loop running in its thread, and Django refuses ORM calls from a thread
with a running loop; so the browser runs in a worker thread and the database work stays in the test's thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import TypeVar

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, sync_playwright

from bindings.services import do_put_route
from streams.management import demo_orders
from streams.management.commands import demo_setup
from tests.conftest import unique

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip

T = TypeVar("T")


def in_browser(scenario: Callable[[Page], T]) -> T:
    """Run `scenario` on a fresh page of a headless Chromium, in a thread of its own."""

    def run() -> T:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                return scenario(browser.new_page())
            finally:
                browser.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result(timeout=60)


def test_the_demo_page_shows_a_message_produced_after_it_opened(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=2)
    do_put_route(name="demo-items", path="/items", topic=topic)
    marker = unique("hello")

    def scenario(page: Page) -> tuple[str, str]:
        page.goto(daphne_url + "/")
        page.wait_for_function("document.getElementById('state').textContent === 'open'", timeout=10_000)
        produce(topic, json.dumps({"marker": marker}).encode(), partition=1)
        page.wait_for_function("(m) => window.received.some((e) => e.data.includes(m))", arg=marker, timeout=10_000)
        return page.inner_text("#events"), page.inner_text("#count")

    events, count = in_browser(scenario)
    assert marker in events
    assert count == "1"


def test_the_demo_page_shows_the_avro_routes_records_as_the_documented_json(
    daphne_url: str,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items, orders = new_topic(partitions=2), new_topic(partitions=2)
    monkeypatch.setattr(demo_setup, "PASSWORD_FILE", tmp_path / "demo-admin-password")
    # As `make run` does: the routes, the inline catalog and the topic model come from demo_setup.
    call_command("demo_setup", "--topic", items, "--avro-topic", orders, stdout=StringIO())
    at = datetime(2024, 5, 1, 12, 30, 15, 250_000, tzinfo=UTC)
    written = [demo_orders.order(3, at=at), demo_orders.order(4, at=at)]
    documented = [
        {
            "id": "o-3",
            "note": "leave at the door",
            "placed_at": "2024-05-01T12:30:15.250Z",
            "total": "15.50",
            "status": "PLACED",
            "customer": {"name": "Ada", "city": "London"},
        },
        {
            "id": "o-4",
            "note": None,
            "placed_at": "2024-05-01T12:30:15.250Z",
            "total": "16.50",
            "status": "PAID",
            "customer": {"name": "Grace", "city": "New York"},
        },
    ]
    marker = unique("still-json")

    def scenario(page: Page) -> tuple[list[str], str, str, str]:
        page.goto(daphne_url + "/")
        for state in ("state", "avro-state"):
            page.wait_for_function(f"document.getElementById('{state}').textContent === 'open'", timeout=10_000)
        for order in written:
            produce(orders, demo_orders.encode(order), key=order["id"].encode(), partition=1)
        produce(items, json.dumps({"marker": marker}).encode())
        page.wait_for_function("window.receivedAvro.length >= 2 && window.received.length >= 1", timeout=10_000)
        data = page.evaluate("window.receivedAvro.map((event) => event.data)")
        return data, page.inner_text("#avro-events"), page.inner_text("#events"), page.inner_text("#avro-count")

    data, shown, items_shown, count = in_browser(scenario)
    assert [json.loads(event) for event in data] == documented
    assert data[0] == json.dumps(documented[0], separators=(",", ":"))  # compact, in the schema's field order
    for event in data:
        assert event in shown
    assert count == "2"
    assert marker in items_shown  # the JSON route goes on beside it
    assert "o-3" not in items_shown
