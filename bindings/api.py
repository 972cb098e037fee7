"""REST API (`/api/v1/`): routes and endpoints, keyed by name.

Routes are written through `bindings.services.do_put_route`, so the API validates exactly as the admin does;
a 400 body maps each bad field to its messages (`topic`, `paths[1]`, `filters[0].key`, ...). `PUT` creates or
replaces a route (idempotent provisioning); `POST` creates one and refuses a name already taken.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError, QuerySet
from django.http import Http404
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.models import (
    DEFAULT_ENDPOINT,
    EVENT_ID_ETAG,
    SLOW_CLIENT_CLOSE,
    START_HISTORICAL,
    Endpoint,
    Route,
    routes_in_order,
)
from bindings.services import do_delete_route, do_put_route


def _as_api_error(exc: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages})


def route_representation(route: Route) -> dict[str, Any]:
    return {
        "name": route.name,
        "position": route.position,
        "endpoint": route.endpoint.name,
        "topic": route.topic,
        "paths": [condition.path for condition in route.conditions.all()],
        "filters": [
            {
                "key": route_filter.key,
                "headers": dict(route_filter.header_items()),
                "value": (
                    {"path": route_filter.value_path, "equals": route_filter.value_equals}
                    if route_filter.value_path
                    else None
                ),
            }
            for route_filter in route.filters.all()
        ],
        "event_id": route.event_id,
        "start": route.start,
        "caught_up": route.caught_up,
        "slow_client": route.slow_client,
    }


class RouteSerializer(serializers.Serializer[Route]):
    """Shapes only; everything else is checked by `do_put_route`, which names the bad field."""

    name = serializers.SlugField(max_length=100, required=False)
    position = serializers.IntegerField(required=False)
    endpoint = serializers.SlugField(max_length=100, required=False)
    topic = serializers.CharField(required=False, trim_whitespace=False)
    paths = serializers.ListField(child=serializers.CharField(trim_whitespace=False), required=False)
    path = serializers.CharField(write_only=True, required=False, trim_whitespace=False)
    filters = serializers.ListField(child=serializers.JSONField(), required=False)
    event_id = serializers.ChoiceField(choices=Route.EventId.choices, required=False)
    start = serializers.ChoiceField(choices=Route.Start.choices, required=False)
    caught_up = serializers.BooleanField(required=False)
    slow_client = serializers.ChoiceField(choices=Route.SlowClient.choices, required=False)

    def to_representation(self, instance: Route) -> dict[str, Any]:
        return route_representation(instance)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = self.context.get("name")
        if name is not None and attrs.get("name", name) != name:
            raise serializers.ValidationError({"name": ["A route keeps its name: create another and delete this."]})
        if not self.partial:
            required = {"topic": "A route needs a topic."}
            if "path" not in attrs:
                required["paths"] = "A route needs at least one path."
            if name is None:
                required["name"] = "A route needs a name."
            missing = {field: [message] for field, message in required.items() if field not in attrs}
            if missing:
                raise serializers.ValidationError(missing)
        return attrs

    def _put(self, values: dict[str, Any]) -> Route:
        try:
            return do_put_route(**values)
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None

    def create(self, validated_data: dict[str, Any]) -> Route:
        values = {
            "name": self.context.get("name"),
            "endpoint": DEFAULT_ENDPOINT,
            "position": 0,
            "filters": [],
            "event_id": EVENT_ID_ETAG,
            "start": START_HISTORICAL,
            "caught_up": False,
            "slow_client": SLOW_CLIENT_CLOSE,
            **validated_data,
        }
        return self._put(values)

    def update(self, instance: Route, validated_data: dict[str, Any]) -> Route:
        """A full update replaces the route (fields left out take their defaults); a partial one merges."""
        values = route_representation(instance) if self.partial else {"name": instance.name}
        if "path" in validated_data:
            values.pop("paths", None)
        return self.create({**values, **validated_data})


class RouteViewSet(viewsets.ModelViewSet[Route]):
    queryset = Route.objects.all()
    serializer_class = RouteSerializer
    lookup_field = "name"

    def get_queryset(self) -> QuerySet[Route]:
        return routes_in_order()

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        name = request.data.get("name") if isinstance(request.data, dict) else None
        if isinstance(name, str) and Route.objects.filter(name=name).exists():
            return Response(
                {"name": [f"A route named {name!r} exists: PUT /api/v1/routes/{name}/ replaces it."]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return super().create(request, *args, **kwargs)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """PUT creates the route if there is none by that name; PATCH needs one."""
        partial = kwargs.pop("partial", False)
        name = kwargs[self.lookup_field]
        instance = self.get_queryset().filter(name=name).first()
        if instance is None and partial:
            raise Http404
        serializer = RouteSerializer(
            instance, data=request.data, partial=partial, context={**self.get_serializer_context(), "name": name}
        )
        serializer.is_valid(raise_exception=True)
        serializer.save()
        return Response(serializer.data, status=status.HTTP_201_CREATED if instance is None else status.HTTP_200_OK)

    def perform_destroy(self, instance: Route) -> None:
        do_delete_route(instance.name)


class EndpointSerializer(serializers.ModelSerializer[Endpoint]):
    class Meta:
        model = Endpoint
        fields = ("name", "retry_ms", "keepalive_s", "cors_origins", "cors_credentials")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        current = {} if self.instance is None else {f: getattr(self.instance, f) for f in self.Meta.fields}
        endpoint = Endpoint(**{**current, **attrs})
        try:
            endpoint.clean()
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None
        return attrs


class EndpointViewSet(viewsets.ModelViewSet[Endpoint]):
    queryset = Endpoint.objects.all()
    serializer_class = EndpointSerializer
    lookup_field = "name"

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return super().destroy(request, *args, **kwargs)
        except ProtectedError:
            return Response(
                {"detail": "Routes use this endpoint: move or delete them first."}, status=status.HTTP_409_CONFLICT
            )
