"""An operator creates a route in the admin and watches it in the route page's live preview, in Chromium."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page

from bindings.models import Change, Route
from tests.conftest import unique
from tests.test_browser import in_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-browser-test-password"


def test_a_route_created_in_the_admin_streams_in_its_live_preview(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    operator = unique("operator")
    User.objects.create_superuser(operator, f"{operator}@example.com", PASSWORD)
    name = unique("admin-route")
    marker = unique("seen-in-preview")

    def scenario(page: Page) -> tuple[str, str, str]:
        page.goto(daphne_url + "/admin/login/?next=/admin/bindings/route/add/")
        page.fill("#id_username", operator)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url("**/admin/bindings/route/add/")
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
    assert Change.objects.filter(kind="route", name=name, actor=operator, source="admin", action="create").exists()
