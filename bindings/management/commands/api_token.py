"""Mint the API token of a machine user: `manage.py api_token USERNAME [--read-only] [--rotate]`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token

from bindings.api.permissions import api_readers, configuration_permissions, grant_api_writer, missing_permissions


class Command(BaseCommand):
    help = (
        "Print the API token of USERNAME, creating the user (no password: it cannot sign in to the admin) and "
        "the token if needed. The user may read and write endpoints, routes and guards (it is made staff and given "
        "their permissions) unless --read-only puts it in api-readers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--read-only", action="store_true", help="only read: a member of api-readers")
        parser.add_argument("--rotate", action="store_true", help="replace the user's token with a new one")

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"]
        read_only: bool = options["read_only"]
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model(username=username)
            user.set_unusable_password()
            try:
                user.full_clean(exclude=["password"])
            except ValidationError as exc:
                raise CommandError(f"Cannot create user {username!r}: {' '.join(exc.messages)}") from None
            user.save()
            self.stderr.write(f"created user {username!r}")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive: its token would be refused.")
        if read_only:
            writes = configuration_permissions("add", "change", "delete")
            if user.is_staff or len(missing_permissions(user, writes)) < len(writes):
                # Quietly taking rights away could lock a person out; a read-only token wants its own user.
                raise CommandError(
                    f"User {username!r} is staff or may write, so its token could write: use another user."
                )
            user.groups.add(api_readers())
        else:
            if not user.is_staff:
                user.is_staff = True
                user.save(update_fields=["is_staff"])
            grant_api_writer(user)
            self.stderr.write(f"{username!r} may read and write endpoints, routes and guards with its token")
        if options["rotate"]:
            Token.objects.filter(user=user).delete()
        token, created = Token.objects.get_or_create(user=user)
        self.stderr.write(f"{'new' if created else 'existing'} token for {username!r}")
        self.stdout.write(token.key)
