"""Import the sse-kafka routes of a zilla.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.zilla import ZillaConfigError, do_import_zilla


class Command(BaseCommand):
    help = "Create or replace routes (and endpoints) from a zilla.yaml's sse and sse-kafka bindings; all or nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="the zilla.yaml to read")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            routes = do_import_zilla(path.read_text())
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        except ZillaConfigError as exc:
            raise CommandError("nothing imported:\n  " + "\n  ".join(exc.problems)) from None
        for route in routes:
            paths = ", ".join(c.path for c in route.conditions.all())
            self.stdout.write(f"route {route.name}: {paths} -> {route.topic}")
