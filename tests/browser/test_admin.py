"""An operator creates a route in the admin and watches it in the route page's live preview, in Chromium."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, Request

from bindings.models import Change, Route
from bindings.services import do_put_guard, do_put_route
from tests.browser.test_demo import in_browser
from tests.conftest import unique
from tests.support.jwt_keys import guard_fields, token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-browser-test-password"


def operator() -> str:
    name = unique("operator")
    User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    return name


def sign_in(page: Page, base_url: str, username: str, then: str) -> None:
    page.goto(f"{base_url}/admin/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**" + then)


def test_a_route_created_in_the_admin_streams_in_its_live_preview(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    username = operator()
    name = unique("admin-route")
    marker = unique("seen-in-preview")

    def scenario(page: Page) -> tuple[str, str, str]:
        sign_in(page, daphne_url, username, "/admin/bindings/route/add/")
        page.fill("#id_name", name)
        page.fill("#id_topic", topic)
        page.fill("input[name='conditions-0-path']", f"/{name}/{{id}}")
        page.click("input[name='_continue']")  # save and continue editing: the route's page
        page.wait_for_selector("#live-preview", timeout=10_000)
        page.fill("#preview-param-id", "42")
        snippet = page.inner_text("#preview-snippet")
        page.click("#preview-connect")
        page.wait_for_function("document.getElementById('preview-state').textContent === 'open'", timeout=10_000)
        produce(topic, marker.encode())
        page.wait_for_function(
            "(m) => document.getElementById('preview-events').textContent.includes(m)", arg=marker, timeout=10_000
        )
        return snippet, page.inner_text("#preview-events"), page.inner_text("#preview-count")

    snippet, events, count = in_browser(scenario)
    assert f'import {{ SseClient }} from "{daphne_url}/static/streams/sse-client.js";' in snippet
    assert f'new SseClient("{daphne_url}/{name}/42");' in snippet
    assert marker in events
    assert count == "1"
    route = Route.objects.get(name=name)
    assert [c.path for c in route.conditions.all()] == [f"/{name}/{{id}}"]
    assert Change.objects.filter(kind="route", name=name, actor=username, source="admin", action="create").exists()


def test_a_guarded_routes_preview_sends_the_token_in_a_header_and_says_why_it_is_refused(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard))
    name = unique("guarded-route")
    route = do_put_route(name=name, path=f"/{name}", topic=topic, guarded={guard: ["read"]})
    page_path = reverse("admin:bindings_route_change", args=[route.pk])
    username = operator()
    marker, good = unique("seen-with-a-token"), token()
    state = "document.getElementById('preview-state').textContent"

    def scenario(page: Page) -> tuple[str, str, str, list[tuple[str, str | None]]]:
        sign_in(page, daphne_url, username, page_path)
        streams: list[Request] = []

        def record(request: Request) -> None:
            if request.url.split("?", 1)[0] == f"{daphne_url}/{name}":
                streams.append(request)

        page.on("request", record)
        page.fill("#preview-token", "not-a-jwt")
        page.click("#preview-connect")
        page.wait_for_function(f"{state}.startsWith('closed (refused')", timeout=10_000)
        refused = page.inner_text("#preview-state")
        page.fill("#preview-token", good)
        page.click("#preview-connect")
        page.wait_for_function(f"{state} === 'open'", timeout=10_000)
        produce(topic, marker.encode())
        page.wait_for_function(
            "(m) => document.getElementById('preview-events').textContent.includes(m)", arg=marker, timeout=10_000
        )
        sent = [(request.url, request.headers.get("authorization")) for request in streams]
        return refused, page.inner_text("#preview-snippet"), page.inner_text("#preview-events"), sent

    refused, snippet, events, sent = in_browser(scenario)
    assert refused.startswith("closed (refused 401: "), refused
    assert marker in events
    # The token went in a header, never in the URL (nor in the snippet, which shows how to pass a callback).
    assert sent == [(f"{daphne_url}/{name}", "Bearer not-a-jwt"), (f"{daphne_url}/{name}", f"Bearer {good}")]
    assert "token: async () => getToken()" in snippet
    assert good not in snippet


def test_the_preview_asks_for_fewer_fields_and_deltas_and_shows_whole_values(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, name = new_topic(), unique("shaped-route")
    route = do_put_route(name=name, path=f"/{name}", topic=topic, fields=["/price", "/item/name"])
    username = operator()
    then = reverse("admin:bindings_route_change", args=[route.pk])

    def scenario(page: Page) -> tuple[str, list[str], str]:
        sign_in(page, daphne_url, username, then)
        page.fill("#preview-fields", "/price")
        page.check("#preview-delta")
        page.dispatch_event("#preview-delta", "input")
        snippet = page.inner_text("#preview-snippet")
        page.click("#preview-connect")
        page.wait_for_function("document.getElementById('preview-state').textContent === 'open'", timeout=10_000)
        for price in (1, 2, 3):
            produce(topic, f'{{"price": {price}, "item": {{"name": "tea"}}, "pad": "{"x" * 200}"}}'.encode(), key=b"k")
        page.wait_for_function("document.getElementById('preview-count').textContent === '3'", timeout=10_000)
        shown = page.locator("#preview-events li").all_inner_texts()
        page.fill("#preview-fields", "/pad")  # not one of the route's fields
        page.click("#preview-connect")
        page.wait_for_function(
            "document.getElementById('preview-state').textContent.startsWith('closed (refused 400')", timeout=10_000
        )
        return snippet, shown, page.inner_text("#preview-state")

    snippet, shown, refused = in_browser(scenario)
    assert f'new SseClient("{daphne_url}/{name}?fields=%2Fprice", {{' in snippet
    assert 'delta: "merge-patch"' in snippet
    assert [text.split("] ", 1)[1] for text in shown] == ['{"price":1}', '{"price":2}', '{"price":3}']
    assert "'/pad' is not one of this route's fields" in refused


def test_the_preview_shows_what_the_route_does_to_the_topics_recent_records(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, name = new_topic(), unique("recent-route")
    filters = [{"expression": "value.price > 1"}]
    route = do_put_route(name=name, path=f"/{name}", topic=topic, fields=["/price"], filters=filters)
    for price in (1, 2):
        produce(topic, f'{{"price": {price}, "name": "tea"}}'.encode(), key=b"k")
    username = operator()
    then = reverse("admin:bindings_route_change", args=[route.pk])

    def scenario(page: Page) -> list[list[str]]:
        sign_in(page, daphne_url, username, then)
        page.click("#preview-recent")
        page.wait_for_function(
            "document.getElementById('preview-recent-state').textContent.startsWith('2 records')", timeout=10_000
        )
        return [row.locator("td").all_inner_texts() for row in page.locator("#preview-recent-table tbody tr").all()]

    rows = in_browser(scenario)
    assert [row[2:] for row in rows] == [
        ['{"price": 1, "name": "tea"}', "filtered out", ""],
        ['{"price": 2, "name": "tea"}', "sent", '{"price":2}'],
    ]
