"""The rollup runs in the admin: when each ran, what it read and wrote, how it ended. Read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from analytics.models import RollupRun


@admin.register(RollupRun)
class RollupRunAdmin(admin.ModelAdmin[RollupRun]):
    list_display = ("started_at", "finished_at", "trigger", "status", "messages", "rows_in", "rows_out", "duration_s")
    list_filter = ("status", "trigger")
    readonly_fields = (
        "started_at", "finished_at", "trigger", "status", "messages", "rows_in", "rows_out", "duration_s", "error",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
