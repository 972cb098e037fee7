"""`manage.py zilla import FILE [--dry-run] [--prune]` and `manage.py zilla export [--strict]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.history import Actor
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla


class Command(BaseCommand):
    help = (
        "zilla.yaml in and out. `import FILE`: create or replace the endpoints, jwt guards and sse-kafka routes it "
        "describes, all or nothing, listing what it ignores; `--dry-run` shows the changes and writes nothing. "
        "`export`: print the configuration as a zilla.yaml."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{import,export}")
        importing = actions.add_parser("import", help="import a zilla.yaml")
        importing.add_argument("file", type=Path, help="the zilla.yaml to read")
        importing.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
        importing.add_argument("--prune", action="store_true", help="delete the routes the file does not have")
        importing.add_argument("--user", default="zilla import", help="who imports, for the change history")
        exporting = actions.add_parser("export", help="print the configuration as a zilla.yaml")
        exporting.add_argument("--name", default="sse-platform", help="the zilla.yaml `name`")
        exporting.add_argument(
            "--strict", action="store_true", help="Zilla's schema only: leave out our extensions (listed on stderr)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            text, notes = export_zilla(options["name"], strict=options["strict"])
            self.stdout.write(text, ending="")
            for note in notes:
                self.stderr.write(note)
            return
        path: Path = options["file"]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        actor = Actor(name=options["user"], source="import")
        try:
            result = do_import_zilla(text, actor=actor, dry_run=options["dry_run"], prune=options["prune"])
        except ZillaConfigError as exc:
            raise CommandError("nothing imported:\n  " + "\n  ".join(exc.problems)) from None
        for line in result.lines():
            self.stdout.write(line)
        if result.dry_run:
            self.stdout.write("dry run: nothing was written")
