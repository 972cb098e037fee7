"""Print the routes as an AsyncAPI 3.0 document."""

from __future__ import annotations

from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandParser

from bindings.asyncapi import export_asyncapi


class Command(BaseCommand):
    help = "Print an AsyncAPI 3.0 document (YAML) of the routes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--server", default="http://127.0.0.1:8000", help="the platform's base URL")

    def handle(self, *args: Any, **options: Any) -> None:
        document = export_asyncapi(options["server"])
        self.stdout.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), ending="")
