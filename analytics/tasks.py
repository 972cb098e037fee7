"""The rollup as a Celery task, run by beat on the schedule stored in the database (django-celery-beat)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from analytics.rollups import run_rollup

ROLLUP_TASK = "analytics.tasks.rollup_delivery_log"


# celery is untyped, hence the ignore.
@shared_task(  # type: ignore[untyped-decorator]
    name=ROLLUP_TASK, autoretry_for=(Exception,), retry_backoff=5, max_retries=3, acks_late=True
)
def rollup_delivery_log(trigger: str = "schedule") -> dict[str, Any]:
    """Roll up the delivery log's new rows. A failed run wrote nothing and is retried; a run that finds another
    one running is recorded as skipped."""
    run = run_rollup(trigger=trigger)
    return {
        "run": run.pk,
        "status": run.status,
        "messages": run.messages,
        "rows_in": run.rows_in,
        "rows_out": run.rows_out,
    }
