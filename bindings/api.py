"""REST API (`/api/v1/`): routes."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers, viewsets

from bindings.models import Route


class RouteSerializer(serializers.ModelSerializer[Route]):
    class Meta:
        model = Route
        fields = ("id", "name", "path", "topic", "position", "created", "updated")
        read_only_fields = ("id", "created", "updated")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        route = Route(**{**({} if self.instance is None else self._current()), **attrs})
        try:
            route.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return attrs

    def _current(self) -> dict[str, Any]:
        assert self.instance is not None  # noqa: S101
        return {f: getattr(self.instance, f) for f in ("name", "path", "topic", "position")}


class RouteViewSet(viewsets.ModelViewSet[Route]):
    queryset = Route.objects.all()
    serializer_class = RouteSerializer
    lookup_field = "name"
