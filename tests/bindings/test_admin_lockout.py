"""Admin sign-in throttling (django-axes): five failures lock one username from one address, visibly."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-operator-password"


def sign_in(client: Client, username: str, password: str) -> int:
    response = client.post("/admin/login/?next=/admin/", {"username": username, "password": password})
    return response.status_code


def signed_in(client: Client) -> bool:
    return client.get("/admin/").status_code == 200


def lock_out(client: Client, username: str) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, username, "not-the-password") == 200, "the form again, with its error"
    assert sign_in(client, username, "not-the-password") == 429


def test_five_failures_refuse_even_the_right_password() -> None:
    User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    client = Client(REMOTE_ADDR="192.0.2.10")
    lock_out(client, "operator")
    response = client.post("/admin/login/?next=/admin/", {"username": "operator", "password": PASSWORD})
    assert response.status_code == 429
    page = response.content.decode()
    assert "Sign-in locked" in page
    assert "operator" in page
    assert "Access attempts" in page, "the page says how to unlock"
    assert not signed_in(client)


def test_another_user_or_another_address_is_not_locked() -> None:
    User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    User.objects.create_superuser("colleague", "co@example.com", PASSWORD)
    lock_out(Client(REMOTE_ADDR="192.0.2.10"), "operator")
    same_address = Client(REMOTE_ADDR="192.0.2.10")
    assert sign_in(same_address, "colleague", PASSWORD) == 302
    assert signed_in(same_address)
    other_address = Client(REMOTE_ADDR="192.0.2.99")
    assert sign_in(other_address, "operator", PASSWORD) == 302
    assert signed_in(other_address)


def test_a_success_before_the_limit_starts_the_count_again() -> None:
    User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    client = Client(REMOTE_ADDR="192.0.2.10")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "operator", "not-the-password")
    assert sign_in(client, "operator", PASSWORD) == 302
    client.logout()
    assert sign_in(client, "operator", "not-the-password") == 200, "one failure after a success is not a lock"


def test_the_lock_is_visible_and_removable_in_the_admin(admin_client: Client) -> None:
    User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    client = Client(REMOTE_ADDR="192.0.2.10")
    lock_out(client, "operator")
    attempt = AccessAttempt.objects.get(username="operator")
    assert attempt.failures_since_start == settings.AXES_FAILURE_LIMIT
    assert attempt.ip_address == "192.0.2.10"
    listing = admin_client.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200
    assert "operator" in listing.content.decode()
    assert "192.0.2.10" in listing.content.decode()
    deleted = admin_client.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert sign_in(client, "operator", PASSWORD) == 302, "unlocked by deleting the attempt"


def test_api_tokens_are_not_throttled() -> None:
    user = User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    lock_out(Client(REMOTE_ADDR="192.0.2.10"), "operator")
    api = Client(REMOTE_ADDR="192.0.2.10", HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    assert api.get("/api/v1/routes/").status_code == 200
