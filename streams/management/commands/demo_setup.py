"""Create the demo: the `items-snapshots` topic (JSON) and its `/items` route, the `orders-avro` topic (Avro, read
through the inline catalog `demo`) and its `/orders` route, and an admin user."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.selectors import catalog_specs
from bindings.services import do_put_catalog, do_put_route, do_put_topic_model
from config.env import BASE_DIR
from streams.kafka.admin import ensure_topic
from streams.management import demo_orders

PASSWORD_FILE = BASE_DIR / "var" / "demo-admin-password"


class Command(BaseCommand):
    help = "Create the demo topics, routes, Avro catalog and admin user (idempotent); prints the admin credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--topic", default="items-snapshots")
        parser.add_argument("--path", default="/items")
        parser.add_argument("--avro-topic", default="orders-avro")
        parser.add_argument("--avro-path", default="/orders")
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        topic, path, username = options["topic"], options["path"], options["username"]
        created = ensure_topic(settings.KAFKA, topic, partitions=2)
        do_put_route(name="demo-items", path=path, topic=topic)
        avro_topic, avro_path = options["avro_topic"], options["avro_path"]
        avro_created = ensure_topic(settings.KAFKA, avro_topic, partitions=2)
        self._avro_route(avro_topic, avro_path)
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
        self.stdout.write(f"topic: {avro_topic} ({'created' if avro_created else 'exists'})")
        self.stdout.write(f"route: {avro_path} -> {avro_topic} (Avro, catalog {demo_orders.CATALOG}, shown as JSON)")
        self.stdout.write(f"admin user: {username}")
        self.stdout.write(f"admin password: {password}")

    @staticmethod
    def _avro_route(topic: str, path: str) -> None:
        """The Avro topic's schema in an inline catalog, its value model, and its route. The catalog is put with
        the subjects it already holds (another run's topic keeps its schema) and this topic's."""
        subjects: dict[str, dict[str, str]] = {}
        for catalog in catalog_specs():
            if catalog.name == demo_orders.CATALOG:
                for schema in catalog.schemas:  # by subject and version: each subject ends with its latest
                    subjects[schema.subject] = {"format": schema.format, "schema": schema.text}
        subjects[demo_orders.subject(topic)] = {"format": "avro", "schema": demo_orders.SCHEMA_TEXT}
        do_put_catalog(name=demo_orders.CATALOG, subjects=subjects)
        do_put_topic_model(topic=topic, value={"model": "avro", "catalog": demo_orders.CATALOG, "strategy": "topic"})
        do_put_route(name=demo_orders.ROUTE, path=path, topic=topic)

    def _password(self) -> str:
        if PASSWORD_FILE.exists():
            return PASSWORD_FILE.read_text().strip()
        PASSWORD_FILE.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        PASSWORD_FILE.write_text(password + "\n")
        PASSWORD_FILE.chmod(0o600)
        return password
