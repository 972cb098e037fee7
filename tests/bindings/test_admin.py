"""The admin's guards, its change history and the route page's live preview (issue 5, item 1)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.models import Change, Guard, Route
from bindings.services import do_put_guard, do_put_route
from tests.bindings.test_control_plane import route_form
from tests.support.jwt_keys import ISSUER, guard_fields, public_jwk

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-test-password"))
    return client


def guard_form(**fields: Any) -> dict[str, Any]:
    return {
        "name": "jwt",
        "issuer": ISSUER,
        "audience": "sse",
        "keys": json.dumps([public_jwk()]),
        "jwks_url": "",
        "roles_claim": "scope",
        "identity_claim": "sub",
        "attributes": "{}",
        "challenge_s": 0,
        "cookie": "",
        **fields,
    }


def test_the_admin_creates_a_guard_and_records_who_did(admin_client: Client) -> None:
    response = admin_client.post("/admin/bindings/guard/add/", guard_form())
    assert response.status_code == 302, response.context and response.context["errors"]
    assert Guard.objects.get().keys == [public_jwk()]
    change = Change.objects.get()
    assert (change.actor, change.source, change.action, change.kind, change.name) == (
        "operator", "admin", "create", "guard", "jwt"
    )  # fmt: skip
    assert change.before is None
    assert change.after is not None
    assert change.after["issuer"] == ISSUER


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"keys": "[]"}, "keys", "A guard needs its public keys, or a JWKS URL to read them from."),
        ({"keys": json.dumps([{"kid": "k", "alg": "HS256", "kty": "oct", "k": "c2VjcmV0"}])}, "keys", "private key"),
        ({"keys": json.dumps([{**public_jwk(), "n": "not base64!"}])}, "keys", "not a usable RS256 public key"),
        ({"keys": json.dumps([{k: v for k, v in public_jwk().items() if k != "kid"}])}, "keys", "needs a `kid`"),
        ({"jwks_url": "https://auth.example.com/jwks.json"}, "jwks_url", "not both"),
        ({"attributes": '{"tenant": "org..id"}'}, "attributes", "claim path"),
        ({"roles_claim": "a..b"}, "roles_claim", "claim path"),
    ],
    ids=["no-keys", "symmetric", "bad-key", "no-kid", "keys-and-url", "attribute-path", "roles-path"],
)
def test_the_admin_shows_a_bad_guard_on_the_field(
    admin_client: Client, fields: dict[str, Any], field: str, message: str
) -> None:
    response = admin_client.post("/admin/bindings/guard/add/", guard_form(**fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert any(message in text for text in errors[field])
    assert not Guard.objects.exists()


def test_the_admin_refuses_a_plain_http_jwks_url(admin_client: Client, settings: Any) -> None:
    settings.SSE_JWKS_ALLOW_HTTP = False
    response = admin_client.post(
        "/admin/bindings/guard/add/", guard_form(keys="[]", jwks_url="http://auth.example.com/jwks.json")
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "jwks_url": ["A JWKS URL starts with https://: keys read over plain http could be swapped on the way."]
    }
    assert not Guard.objects.exists()


def test_a_route_guarded_in_the_admin_may_use_its_guard_in_templates_and_no_other(admin_client: Client) -> None:
    guard = do_put_guard(**guard_fields("jwt"))
    other = do_put_guard(**guard_fields("other"))
    unguarded = admin_client.post(
        "/admin/bindings/route/add/", route_form(topic="items", filters=[{"key": "${guarded['jwt'].identity}"}])
    )
    assert unguarded.status_code == 200
    formset = next(f for f in unguarded.context["inline_admin_formsets"] if f.formset.prefix == "filters").formset
    assert formset.forms[0].errors == {"key": ["${guarded['jwt']...}: the route is not guarded by 'jwt'."]}

    created = admin_client.post(
        "/admin/bindings/route/add/",
        route_form(
            topic="items",
            filters=[{"key": "${guarded['jwt'].identity}"}],
            guards={guard.pk: "read,items", other.pk: ""},
        ),
    )
    assert created.status_code == 302, created.context and created.context["errors"]
    route = Route.objects.get()
    assert {g.guard.name: g.roles for g in route.guards.all()} == {"jwt": ["read", "items"], "other": []}


def test_route_roles_are_words(admin_client: Client) -> None:
    guard = do_put_guard(**guard_fields("jwt"))
    response = admin_client.post(
        "/admin/bindings/route/add/", route_form(topic="items", guards={guard.pk: "read,has space"})
    )
    assert response.status_code == 200
    formset = next(f for f in response.context["inline_admin_formsets"] if f.formset.prefix == "guards").formset
    assert "roles" in formset.forms[0].errors


def test_admin_edits_and_deletes_are_in_the_history_with_the_fields_that_changed(admin_client: Client) -> None:
    route = do_put_route(name="items", path="/items", topic="items")
    response = admin_client.post(
        f"/admin/bindings/route/{route.pk}/change/",
        {
            **route_form(topic="things"),
            "conditions-INITIAL_FORMS": 1,
            "conditions-0-id": route.conditions.get().pk,
            "conditions-0-route": route.pk,
        },
    )
    assert response.status_code == 302, response.context and response.context["errors"]
    update = Change.objects.filter(action="update").get()
    assert (update.actor, update.source, update.changed_fields()) == ("operator", "admin", ["topic"])
    assert update.before is not None
    assert update.after is not None
    assert (update.before["topic"], update.after["topic"]) == ("items", "things")

    assert admin_client.post(f"/admin/bindings/route/{route.pk}/delete/", {"post": "yes"}).status_code == 302
    deleted = Change.objects.filter(action="delete").get()
    assert (deleted.name, deleted.after) == ("items", None)
    assert [c.source for c in Change.objects.order_by("id")] == ["shell", "admin", "admin"]

    history = admin_client.get("/admin/bindings/change/?kind=route")
    assert history.status_code == 200
    assert b"operator" in history.content
    assert admin_client.get(f"/admin/bindings/change/{deleted.pk}/change/").status_code == 200  # viewable
    assert admin_client.post(f"/admin/bindings/change/{deleted.pk}/delete/", {"post": "yes"}).status_code == 403


def test_the_route_page_has_a_live_preview_and_a_snippet(admin_client: Client) -> None:
    route = do_put_route(name="items", paths=["/items/{id}", "/all"], topic="items")
    page = admin_client.get(f"/admin/bindings/route/{route.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="live-preview"' in html
    assert 'id="preview-snippet"' in html
    assert 'id="preview-token"' not in html  # not guarded: no token to give
    patterns = page.context["preview"]["patterns"]
    assert patterns == [{"text": "/items/{id}", "params": ["id"]}, {"text": "/all", "params": []}]
    assert "import { SseClient } from" in html  # the preview and its snippet use the platform's JS client
    assert "new SseClient(" in html
    assert "Recent changes" in html

    do_put_guard(**guard_fields("jwt"))
    do_put_route(name="items", paths=["/items/{id}"], topic="items", guarded={"jwt": []})
    assert 'id="preview-token"' in admin_client.get(f"/admin/bindings/route/{route.pk}/change/").content.decode()
