"""The demo page in Debian's Chromium, driven by Playwright.

Playwright's sync API keeps an event loop running in its thread, and Django refuses ORM calls from a thread
with a running loop; so the browser runs in a worker thread and the database work stays in the test's thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from playwright.sync_api import Page, sync_playwright

from bindings.services import do_put_route
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
