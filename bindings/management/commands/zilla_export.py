"""Export the routes as a zilla.yaml (sse and sse-kafka bindings)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bindings.zilla import export_zilla


class Command(BaseCommand):
    help = "Print the routes as zilla.yaml bindings; what Zilla's schema cannot carry is listed on stderr."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="sse-platform", help="the zilla.yaml `name`")

    def handle(self, *args: Any, **options: Any) -> None:
        text, left_out = export_zilla(options["name"])
        self.stdout.write(text, ending="")
        for item in left_out:
            self.stderr.write(f"left out: {item}")
