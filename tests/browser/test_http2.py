"""What HTTP/2 changes for a page with many streams, in Debian's Chromium driven by Playwright.

Over HTTP/1.1 a browser holds at most six connections per origin, and an EventSource keeps one: the seventh
stream of a page waits until one of the six ends. Over HTTPS with HTTP/2 (platform/web.py's TLS port), every
stream of the page shares one connection, so twelve streams all open and all receive.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Page, sync_playwright

from bindings.selectors import START_LIVE
from tests.browser.test_demo import ARGS, CHROMIUM
from tests.conftest import unique, wait_until
from tests.e2e.test_http2 import Web, web_with_https
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.servers import HOST

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STREAMS = 12

OPEN_STREAMS = """([path, count]) => {
    window.received = Array.from({length: count}, () => []);
    window.opened = Array(count).fill(false);
    window.sources = Array.from({length: count}, (_, i) => {
        const source = new EventSource(path);
        source.onopen = () => { window.opened[i] = true; };
        source.onmessage = (event) => { window.received[i].push(event.data); };
        return source;
    });
}"""
COUNTS = """(marker) => ({
    open: window.opened.filter(Boolean).length,
    connecting: window.sources.filter((s) => s.readyState === EventSource.CONNECTING).length,
    received: window.received.filter((r) => r.some((d) => d.includes(marker))).length,
    protocol: performance.getEntriesByType('navigation')[0].nextHopProtocol,
})"""


def in_browser_ignoring_https_errors(scenario: Callable[[Page], dict[str, object]]) -> dict[str, object]:
    """Like tests/browser/test_demo.py's `in_browser`, in a context that accepts the development certificate."""

    def run() -> dict[str, object]:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                return scenario(browser.new_context(ignore_https_errors=True).new_page())
            finally:
                browser.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result(timeout=90)


def open_twelve_streams(
    web: Web, base: str, path: str, expect_open: int, produce: Callable[[str], object]
) -> dict[str, object]:
    """Open twelve EventSources to `path` on a page of `base`; once `expect_open` are open, produce a marker and
    wait until that many received it. Returns what the page and the server counted then."""
    marker = unique("m")

    def scenario(page: Page) -> dict[str, object]:
        page.goto(base + "/-/health")  # any page of the origin
        page.evaluate(OPEN_STREAMS, [path, STREAMS])
        page.wait_for_function(f"window.opened.filter(Boolean).length === {expect_open}", timeout=20_000)
        wait_until(lambda: web.health()["streams"] == expect_open, timeout=20)
        produce(marker)
        page.wait_for_function(
            "([m, n]) => window.received.filter((r) => r.some((d) => d.includes(m))).length === n",
            arg=[marker, expect_open],
            timeout=20_000,
        )
        counts: dict[str, object] = page.evaluate(COUNTS, marker)
        counts["server_streams"] = web.health()["streams"]
        return counts

    return in_browser_ignoring_https_errors(scenario)


def test_twelve_streams_of_one_page_all_receive_over_http2_and_only_six_over_http1(
    new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic, start=START_LIVE)

    def send(marker: str) -> None:
        produce(topic, json.dumps({"marker": marker}).encode())

    with web_with_https() as web:
        over_http2 = open_twelve_streams(web, web.https, path, STREAMS, send)
    with web_with_https() as web:
        over_http1 = open_twelve_streams(web, f"http://{HOST}:{web.port}", path, 6, send)

    assert over_http2["protocol"] == "h2"
    assert over_http2 == {**over_http2, "open": 12, "connecting": 0, "received": 12, "server_streams": 12}
    assert over_http1["protocol"] == "http/1.1"
    # Six connections per origin: the other six streams wait, never reaching the server.
    assert over_http1 == {**over_http1, "open": 6, "connecting": 6, "received": 6, "server_streams": 6}
