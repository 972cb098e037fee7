"""REST API (`/api/v1/`): routes and endpoints, keyed by name.

Routes are written through `bindings.services.do_put_route`, so the API validates exactly as the admin does;
a 400 body maps each bad field to its messages (`topic`, `paths[1]`, `filters[0].key`, ...). `PUT` creates or
replaces a route (idempotent provisioning); `POST` creates one and refuses a name already taken.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import slug_re
from django.db.models import QuerySet
from django.http import Http404
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.api.permissions import model_permissions, require
from bindings.api.problems import Conflict
from bindings.history import Actor
from bindings.models import (
    Change,
    Endpoint,
    Guard,
    Route,
    routes_in_order,
)
from bindings.representations import endpoint_representation, guard_representation, route_representation
from bindings.services import (
    do_delete_endpoint,
    do_delete_guard,
    do_delete_route,
    do_put_endpoint,
    do_put_guard,
    do_put_route,
)
from bindings.shapes import EndpointShape, GuardShape, RouteShape

NAME_REGEX = "[-a-zA-Z0-9_]+"


def api_actor(request: Request | None) -> Actor:
    return Actor.of(getattr(request, "user", None), "api")


def _as_api_error(exc: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages})


class RouteSerializer(RouteShape):
    """The route shape; everything else is checked by `do_put_route`, which names the bad field."""

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
            return do_put_route(**values, actor=api_actor(self.context.get("request")))
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None

    def create(self, validated_data: dict[str, Any]) -> Route:
        """Fields left out take `do_put_route`'s defaults, which are the model's."""
        return self._put({"name": self.context.get("name"), **validated_data})

    def update(self, instance: Route, validated_data: dict[str, Any]) -> Route:
        """A full update replaces the route (fields left out take their defaults); a partial one merges."""
        values = route_representation(instance) if self.partial else {"name": instance.name}
        if "path" in validated_data:
            values.pop("paths", None)
        return self.create({**values, **validated_data})


class _NamedSerializer(serializers.Serializer[Any]):
    """Endpoints, guards and catalogs: `PUT` by name creates or replaces through `bindings.services`, which
    validates."""

    noun = ""  # what the messages call it (not `kind`: a catalog has a field of that name)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = self.context.get("name")
        if name is not None and attrs.get("name", name) != name:
            raise serializers.ValidationError({"name": [f"A {self.noun} keeps its name: create another instead."]})
        if name is None and "name" not in attrs:
            raise serializers.ValidationError({"name": [f"A {self.noun} needs a name."]})
        return attrs

    def put(self, values: dict[str, Any]) -> Any:
        raise NotImplementedError

    def create(self, validated_data: dict[str, Any]) -> Any:
        values = {"name": self.context.get("name"), **validated_data}
        try:
            return self.put(values)
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        values = self.to_representation(instance) if self.partial else {"name": instance.name}
        return self.create({**values, **validated_data})


class EndpointSerializer(EndpointShape, _NamedSerializer):
    noun = "endpoint"

    def to_representation(self, instance: Endpoint) -> dict[str, Any]:
        return endpoint_representation(instance)

    def put(self, values: dict[str, Any]) -> Endpoint:
        return do_put_endpoint(**values, actor=api_actor(self.context.get("request")))


class GuardSerializer(GuardShape, _NamedSerializer):
    noun = "guard"

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if not self.partial:
            missing = {field: [f"A guard needs its {field}."] for field in ("issuer", "audience") if field not in attrs}
            if missing:
                raise serializers.ValidationError(missing)
        return attrs

    def to_representation(self, instance: Guard) -> dict[str, Any]:
        return guard_representation(instance)

    def put(self, values: dict[str, Any]) -> Guard:
        return do_put_guard(**values, actor=api_actor(self.context.get("request")))


class _NamedViewSet(viewsets.ModelViewSet[Any]):
    """Routes, endpoints and guards: create with POST (a taken name is refused) or PUT by name (create or
    replace); deleting an endpoint or a guard that routes use is refused (409)."""

    lookup_field = "name"
    # Names are slugs: any other text is a 404 before it reaches a query (Postgres refuses NUL characters).
    lookup_value_regex = NAME_REGEX
    kind = ""

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        name = request.data.get("name") if isinstance(request.data, dict) else None
        if isinstance(name, str) and slug_re.match(name) and self.get_queryset().filter(name=name).exists():
            raise serializers.ValidationError(
                {"name": [f"A {self.kind} named {name!r} exists: PUT {request.path}{name}/ replaces it."]}
            )
        return super().create(request, *args, **kwargs)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """PUT creates the object if there is none by that name; PATCH needs one."""
        partial = kwargs.pop("partial", False)
        name = kwargs[self.lookup_field]
        instance = self.get_queryset().filter(name=name).first()
        if instance is None and partial:
            raise Http404
        if instance is None:  # PUT creates: the permission class checked `change_` only
            require(request.user, model_permissions(self.get_queryset().model, "add"))
        serializer = self.get_serializer_class()(
            instance, data=request.data, partial=partial, context={**self.get_serializer_context(), "name": name}
        )
        serializer.is_valid(raise_exception=True)
        serializer.save()
        return Response(serializer.data, status=status.HTTP_201_CREATED if instance is None else status.HTTP_200_OK)

    def delete_named(self, name: str) -> None:
        raise NotImplementedError

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        try:
            self.delete_named(instance.name)
        except DjangoValidationError as exc:
            raise Conflict(" ".join(exc.messages)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class RouteViewSet(_NamedViewSet):
    queryset = Route.objects.all()
    serializer_class = RouteSerializer
    kind = "route"

    def get_queryset(self) -> QuerySet[Route]:
        return routes_in_order()

    def delete_named(self, name: str) -> None:
        do_delete_route(name, actor=api_actor(self.request))


class EndpointViewSet(_NamedViewSet):
    queryset = Endpoint.objects.all()
    serializer_class = EndpointSerializer
    kind = "endpoint"

    def delete_named(self, name: str) -> None:
        do_delete_endpoint(name, actor=api_actor(self.request))


class GuardViewSet(_NamedViewSet):
    queryset = Guard.objects.all()
    serializer_class = GuardSerializer
    kind = "guard"

    def delete_named(self, name: str) -> None:
        do_delete_guard(name, actor=api_actor(self.request))


class ChangeSerializer(serializers.ModelSerializer[Change]):
    changed_fields = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Change
        fields = ("id", "at", "actor", "source", "action", "kind", "name", "changed_fields", "before", "after")


class ChangeViewSet(viewsets.ReadOnlyModelViewSet[Change]):
    """Who changed what, newest first: every write through the admin, the API, imports and commands."""

    queryset = Change.objects.all()
    serializer_class = ChangeSerializer
