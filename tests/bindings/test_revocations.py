"""Revocations on the control plane: the services, the REST API and the admin validate them the same way, record
them in the history, and the data plane reads only those in force."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from bindings.history import Actor
from bindings.models import Change, Guard
from bindings.models.revocation import Revocation
from bindings.selectors import RevocationSpec, revocation_specs
from bindings.services import do_change_revocation, do_delete_revocation, do_put_guard, do_revoke
from tests.support.jwt_keys import guard_fields

pytestmark = pytest.mark.django_db


def later(hours: float = 1) -> datetime:
    return timezone.now() + timedelta(hours=hours)


@pytest.fixture
def guard() -> str:
    do_put_guard(**guard_fields("jwt"))
    return "jwt"


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"identity": "alice", "jti": "t-1"}, "jti", "not both"),
        ({}, "identity", "Give the identity to revoke, or a token id"),
        ({"identity": "alice", "until": timezone.now() - timedelta(seconds=1)}, "until", "This time has passed"),
        ({"identity": "alice", "guard": "nobody"}, "guard", "There is no guard named 'nobody'."),
    ],
    ids=["both", "neither", "past", "unknown-guard"],
)
def test_it_refuses_a_bad_revocation_naming_the_field(
    guard: str, values: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        do_revoke(**{"guard": guard, "until": later(), **values})
    assert any(message in text for text in caught.value.message_dict[field]), caught.value.message_dict
    assert not Revocation.objects.exists()
    assert not Change.objects.filter(kind="revocation").exists()


def test_revoking_changing_and_lifting_are_in_the_history(guard: str) -> None:
    actor = Actor(name="ops", source="shell")
    revocation = do_revoke(guard=guard, identity="alice", until=later(), reason="leaked laptop", actor=actor)
    assert revocation.created_by == "ops"
    do_change_revocation(revocation.pk, until=later(2), reason="leaked laptop", actor=actor)
    assert do_delete_revocation(revocation.pk, actor=actor)
    assert not do_delete_revocation(revocation.pk, actor=actor)
    history = list(Change.objects.filter(kind="revocation", name=str(revocation.pk)).order_by("id"))
    assert [change.action for change in history] == ["create", "update", "delete"]
    assert history[0].after is not None
    assert (history[0].after["guard"], history[0].after["identity"], history[0].after["reason"]) == (
        "jwt", "alice", "leaked laptop"
    )  # fmt: skip
    assert history[1].changed_fields() == ["until"]
    assert history[2].after is None


def test_the_data_plane_reads_only_revocations_in_force(guard: str) -> None:
    kept = do_revoke(guard=guard, jti="t-1", until=later())
    lapsed = do_revoke(guard=guard, identity="bob", until=later())
    Revocation.objects.filter(pk=lapsed.pk).update(until=timezone.now() - timedelta(seconds=1))
    assert revocation_specs() == (RevocationSpec(guard="jwt", until=kept.until.timestamp(), jti="t-1"),)


def test_the_api_revokes_shows_moves_and_lifts(api: Client, guard: str) -> None:
    until = later().replace(microsecond=0)
    created = api.post(
        "/api/v1/revocations/",
        {"guard": guard, "identity": "alice", "until": until.isoformat(), "reason": "fired"},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["guard"], body["identity"], body["jti"], body["reason"], body["created_by"]) == (
        "jwt", "alice", "", "fired", "root"
    )  # fmt: skip
    assert datetime.fromisoformat(body["until"]) == until
    url = f"/api/v1/revocations/{body['id']}/"
    assert api.get(url).json() == body
    assert api.get("/api/v1/revocations/?identity=alice&active=true").json()["results"] == [body]
    assert api.get("/api/v1/revocations/?active=false").json()["results"] == []
    sooner = (until - timedelta(minutes=30)).astimezone(UTC)
    moved = api.patch(url, {"until": sooner.isoformat()}, content_type="application/json")
    assert moved.status_code == 200, moved.content
    assert datetime.fromisoformat(moved.json()["until"]) == sooner
    fixed = api.patch(url, {"identity": "bob"}, content_type="application/json")
    assert fixed.status_code == 400
    assert "fixed" in fixed.json()["errors"]["identity"][0]
    assert api.put(url, body, content_type="application/json").status_code == 405
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    actions = Change.objects.filter(kind="revocation").order_by("id").values_list("action", "source", "actor")
    assert list(actions) == [("create", "api", "root"), ("update", "api", "root"), ("delete", "api", "root")]
    assert api.get("/api/v1/changes/?kind=revocation").json()["count"] == 3


def test_the_api_takes_a_revocations_body_back_with_what_it_covers_unchanged(api: Client, guard: str) -> None:
    """A GET's body PATCHed again (a round trip) changes nothing: what it covers may be sent back as it is."""
    created = api.post(
        "/api/v1/revocations/",
        {"guard": guard, "jti": "t-1", "until": later().isoformat(), "reason": "leaked"},
        content_type="application/json",
    ).json()
    url = f"/api/v1/revocations/{created['id']}/"
    reworded = api.patch(url, {**created, "reason": "token leaked"}, content_type="application/json")
    assert reworded.status_code == 200, reworded.content
    assert reworded.json() == {**created, "reason": "token leaked"}
    moved = api.patch(url, {**created, "jti": "t-2"}, content_type="application/json")
    assert moved.status_code == 400
    assert list(moved.json()["errors"]) == ["jti"]
    assert Revocation.objects.get().jti == "t-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"identity": "alice", "jti": "t-1"}, "jti"),
        ({"identity": ""}, "identity"),
        ({"identity": "alice", "until": "2001-01-01T00:00:00Z"}, "until"),
        ({"identity": "alice", "until": "soon"}, "until"),
        ({"identity": "alice", "guard": "nobody"}, "guard"),
        ({"identity": 7}, "identity"),
    ],
    ids=["both", "neither", "past", "not-a-time", "unknown-guard", "not-a-string"],
)
def test_the_api_answers_bad_input_with_a_problem_naming_the_field(
    api: Client, guard: str, body: dict[str, Any], field: str
) -> None:
    response = api.post(
        "/api/v1/revocations/",
        {"guard": guard, "until": later().isoformat(), **body},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 400
    assert list(problem["errors"]) == [field], problem


def test_the_api_needs_the_revocation_permissions(client: Client, guard: str) -> None:
    assert client.get("/api/v1/revocations/").status_code == 401
    user = User.objects.create_user("reader", is_staff=True)
    client.force_login(user)
    refused = client.get("/api/v1/revocations/")
    assert refused.status_code == 403
    assert "bindings.view_revocation" in refused.json()["detail"]
    user.user_permissions.add(Permission.objects.get(codename="view_revocation"))
    assert client.get("/api/v1/revocations/").status_code == 200
    body = {"guard": guard, "identity": "alice", "until": later().isoformat()}
    assert client.post("/api/v1/revocations/", body, content_type="application/json").status_code == 403


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-test-password"))
    return client


def revocation_form(guard_pk: object, **fields: Any) -> dict[str, Any]:
    until = timezone.localtime(later())
    return {
        "guard": guard_pk,
        "identity": "alice",
        "jti": "",
        "until_0": until.strftime("%Y-%m-%d"),
        "until_1": until.strftime("%H:%M:%S"),
        "reason": "",
        **fields,
    }


def test_the_admin_revokes_and_records_who_did(admin_client: Client, guard: str) -> None:
    guard_pk = Guard.objects.get(name=guard).pk
    response = admin_client.post("/admin/bindings/revocation/add/", revocation_form(guard_pk, reason="fired"))
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    revocation = Revocation.objects.get()
    assert (revocation.identity, revocation.created_by, revocation.reason) == ("alice", "operator", "fired")
    change = Change.objects.get(kind="revocation")
    assert (change.action, change.source, change.actor) == ("create", "admin", "operator")
    assert change.name == str(revocation.pk)
    deleted = admin_client.post(f"/admin/bindings/revocation/{revocation.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert Change.objects.filter(kind="revocation", action="delete").count() == 1


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"jti": "t-1"}, "jti", "not both"),
        ({"identity": ""}, "identity", "Give the identity to revoke, or a token id"),
        ({"until_0": "2001-01-01", "until_1": "00:00:00"}, "until", "This time has passed"),
        ({"guard": 987654}, "guard", "Select a valid choice"),
    ],
    ids=["both", "neither", "past", "unknown-guard"],
)
def test_the_admin_shows_a_bad_revocation_on_the_field(
    admin_client: Client, guard: str, fields: dict[str, Any], field: str, message: str
) -> None:
    guard_pk = Guard.objects.get(name=guard).pk
    response = admin_client.post("/admin/bindings/revocation/add/", revocation_form(guard_pk, **fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in text for text in errors[field]), errors
    assert not Revocation.objects.exists()
