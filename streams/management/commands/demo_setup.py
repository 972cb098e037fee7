"""Create the demo: the `items-snapshots` topic, the `/items` route and an admin user."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.services import do_put_route
from config.env import BASE_DIR
from streams.kafka.admin import ensure_topic

PASSWORD_FILE = BASE_DIR / "var" / "demo-admin-password"


class Command(BaseCommand):
    help = "Create the demo topic, route and admin user (idempotent); prints the admin credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--topic", default="items-snapshots")
        parser.add_argument("--path", default="/items")
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        topic, path, username = options["topic"], options["path"], options["username"]
        created = ensure_topic(settings.KAFKA, topic, partitions=2)
        do_put_route(name="demo-items", path=path, topic=topic)
        password = self._password()
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first() or user_model(username=username)
        user.is_staff = user.is_superuser = True
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(
                f"The admin password in {PASSWORD_FILE} is too weak ({' '.join(exc.messages)}): "
                "delete the file and a new one is generated."
            ) from None
        user.set_password(password)
        user.save()
        self.stdout.write(f"topic: {topic} ({'created' if created else 'exists'})")
        self.stdout.write(f"route: {path} -> {topic}")
        self.stdout.write(f"admin user: {username}")
        self.stdout.write(f"admin password: {password}")

    def _password(self) -> str:
        if PASSWORD_FILE.exists():
            return PASSWORD_FILE.read_text().strip()
        PASSWORD_FILE.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        PASSWORD_FILE.write_text(password + "\n")
        PASSWORD_FILE.chmod(0o600)
        return password
