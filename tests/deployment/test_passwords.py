"""Passwords people choose: the full set of Django's validators, and the demo admin's still passes them."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from streams.management.commands import demo_setup

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("password1234", "too common"),
        ("qwertyuiop123", "too common"),
        ("Xy7-kq2", "at least 12 characters"),
        ("482915736048", "entirely numeric"),
        ("margaret.hamilton", "too similar"),
    ],
)
def test_it_refuses_weak_passwords(password: str, reason: str) -> None:
    user = User(username="margaret.hamilton", email="margaret@example.com")
    with pytest.raises(ValidationError, match=reason):
        validate_password(password, user)


def test_a_long_uncommon_password_passes() -> None:
    validate_password("correct horse battery staple", User(username="operator"))


def test_demo_setup_creates_an_admin_whose_generated_password_passes(
    new_topic: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_setup, "PASSWORD_FILE", tmp_path / "demo-admin-password")
    out = StringIO()
    call_command("demo_setup", "--topic", new_topic(), "--path", "/demo-items", "--username", "demo", stdout=out)
    password = (tmp_path / "demo-admin-password").read_text().strip()
    assert f"admin password: {password}" in out.getvalue()
    user = User.objects.get(username="demo")
    assert user.is_superuser
    assert user.check_password(password)
    validate_password(password, user)


def test_demo_setup_refuses_a_weak_password_in_its_file(
    new_topic: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "demo-admin-password").write_text("password\n")
    monkeypatch.setattr(demo_setup, "PASSWORD_FILE", tmp_path / "demo-admin-password")
    with pytest.raises(CommandError, match=r"too weak.*delete the file"):
        call_command("demo_setup", "--topic", new_topic(), "--username", "demo", stdout=StringIO())
    assert not User.objects.filter(username="demo").exists()
