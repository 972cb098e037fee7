"""The admin warns when a route is shadowed by an earlier one (bindings/shadowing.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from bindings.models import Route
from bindings.patterns import parse_path
from bindings.selectors import route_specs
from bindings.services import do_put_guard, do_put_route
from bindings.shadowing import covers, shadows
from tests.bindings.test_control_plane import route_form
from tests.support.jwt_keys import guard_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-test-password"))
    return client


def warnings_of(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request) if message.level_tag == "warning"]


@pytest.mark.parametrize(
    ("earlier", "later", "covered"),
    [
        ("/t/{t}", "/t/orders", True),
        ("/t/{t}", "/t/{id}", True),
        ("/t/orders", "/t/{t}", False),  # the later one serves every other name
        ("/t/{t}", "/t/orders/x", False),
        ("/t/{t}", "/t/", False),  # a parameter never matches an empty segment
    ],
)
def test_a_pattern_covers_another_when_it_matches_every_path_the_other_does(
    earlier: str, later: str, covered: bool
) -> None:
    assert covers(parse_path(earlier), parse_path(later)) is covered


def test_only_an_earlier_route_that_asks_no_more_shadows() -> None:
    guard = do_put_guard(**guard_fields("jwt"))
    do_put_route(name="guarded-any", path="/g/{t}", topic="${params.t}", guarded={guard.name: ["read"]}, position=0)
    do_put_route(name="open-orders", path="/g/orders", topic="orders", position=1)  # asks less: reachable
    do_put_route(name="more-roles", path="/g/items", topic="items", guarded={guard.name: ["read", "x"]}, position=2)
    assert [(s.route, s.path, s.by) for s in shadows(route_specs())] == [("more-roles", "/g/items", "guarded-any")]


def test_the_admin_warns_on_save_and_on_the_list_when_a_route_is_shadowed(admin_client: Client) -> None:
    guard = do_put_guard(**guard_fields("jwt"))
    do_put_route(name="any-topic", path="/t/{t}", topic="${params.t}", position=0)
    saved = admin_client.post(
        "/admin/bindings/route/add/",
        route_form(name="orders", topic="orders", position=1, paths=["/t/orders"], guards={guard.pk: "read"}),
    )
    assert saved.status_code == 302, saved.context and saved.context["errors"]
    assert Route.objects.filter(name="orders").exists()  # saved all the same: the order may be meant
    [warning] = warnings_of(saved)
    assert "'orders' never serves /t/orders" in warning
    assert "'any-topic'" in warning
    listed = admin_client.get("/admin/bindings/route/")
    assert any("'orders' never serves /t/orders" in text for text in warnings_of(listed))


def test_a_route_in_front_of_the_other_is_not_warned_about(admin_client: Client) -> None:
    do_put_route(name="any-topic", path="/t/{t}", topic="${params.t}", position=1)
    saved = admin_client.post(
        "/admin/bindings/route/add/", route_form(name="orders", topic="orders", position=0, paths=["/t/orders"])
    )
    assert saved.status_code == 302, saved.context and saved.context["errors"]
    assert warnings_of(saved) == []
