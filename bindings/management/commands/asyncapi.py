"""AsyncAPI 3.0 from the command line: `asyncapi export [--server URL]`, `asyncapi import FILE [--dry-run]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.asyncapi.document import AsyncApiImportError, dump_yaml, export_asyncapi, import_asyncapi, parse_document
from bindings.history import Actor


class Command(BaseCommand):
    help = (
        "export: print the routes as an AsyncAPI 3.0 document (YAML, or JSON with --json). "
        "import FILE: create or replace routes from a document's SSE channels, all or nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{export,import}")
        export = actions.add_parser("export", help="print the AsyncAPI 3.0 document of the routes")
        export.add_argument("--server", default="http://127.0.0.1:8000", help="the platform's base URL")
        export.add_argument("--json", action="store_true", help="JSON instead of YAML")
        load = actions.add_parser("import", help="create or replace routes from an AsyncAPI 3 document (YAML/JSON)")
        load.add_argument("file", type=Path)
        load.add_argument("--dry-run", action="store_true", help="validate and report, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self._export(options["server"], as_json=options["json"])
        else:
            self._import(options["file"], dry_run=options["dry_run"])

    def _export(self, server: str, *, as_json: bool) -> None:
        try:
            document = export_asyncapi(server)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if as_json:
            self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(dump_yaml(document), ending="")

    def _import(self, path: Path, *, dry_run: bool) -> None:
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        try:
            result = import_asyncapi(
                parse_document(text), dry_run=dry_run, actor=Actor(name="manage.py asyncapi", source="command")
            )
        except AsyncApiImportError as exc:
            raise CommandError("nothing imported:\n  " + "\n  ".join(exc.problems)) from None
        for line in result.lines():
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("dry run: nothing was written")
