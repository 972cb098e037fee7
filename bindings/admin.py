from __future__ import annotations

from django.contrib import admin

from bindings.models import Route


@admin.register(Route)
class RouteAdmin(admin.ModelAdmin[Route]):
    list_display = ("name", "path", "topic", "position", "updated")
    list_editable = ("position",)
    search_fields = ("name", "path", "topic")
    ordering = ("position", "id")
