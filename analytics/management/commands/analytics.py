"""`manage.py analytics rollup`: roll up what the delivery log gained since the last run, now, and print what
the run did."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.models import RollupRun
from analytics.rollups import run_rollup


class Command(BaseCommand):
    help = "Delivery analytics: `rollup` runs the rollup of the delivery log once, now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["rollup"])
        parser.add_argument("--master", help="Spark master (default: the SPARK_MASTER setting)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run = run_rollup(trigger="command", master=options["master"])
        except Exception as exc:
            raise CommandError(f"rollup failed: {exc}") from exc
        if run.status == RollupRun.Status.SKIPPED:
            self.stdout.write("skipped: another rollup is running")
            return
        self.stdout.write(
            f"rollup {run.pk}: {run.messages} messages, {run.rows_in} rows in, {run.rows_out} rows out, "
            f"{run.duration_s:.1f} s"
        )
