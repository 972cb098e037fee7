"""REST API for catalogs (`/api/v1/catalogs/<name>/`) and topic models (`/api/v1/topic-models/<topic>/`).

Both are written through `bindings.services`, so the API validates exactly as the admin does; a 400 body maps
each bad field to its messages (`subjects.orders-value.schema`, `value.catalog`, ...). `PUT` creates or
replaces (idempotent provisioning), `POST` creates and refuses a name (or topic) already taken, `PATCH` merges.
A catalog's `auth` is write-only: the API shows `auth_set` and `auth_updated`, never the header; a write that
moves the URL to another scheme, host or port without giving `auth` removes it (`bindings.services`). A topic model is
keyed by its topic, a pattern that may hold `*` (`/api/v1/topic-models/orders-*/`).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.api.permissions import model_permissions, require
from bindings.api.resources import _as_api_error, _NamedSerializer, _NamedViewSet, api_actor
from bindings.models import Catalog, TopicModel
from bindings.representations import catalog_representation, topic_model_representation
from bindings.services import do_delete_catalog, do_delete_topic_model, do_put_catalog, do_put_topic_model
from bindings.shapes import CatalogShape, TopicModelShape

TOPIC_REGEX = "[-a-zA-Z0-9._*]+"
_READ_ONLY = ("auth_set", "auth_updated", "schemas")


class CatalogSerializer(CatalogShape, _NamedSerializer):
    noun = "catalog"

    def to_representation(self, instance: Catalog) -> dict[str, Any]:
        return catalog_representation(instance)

    def put(self, values: dict[str, Any]) -> Catalog:
        for field in _READ_ONLY:
            values.pop(field, None)
        if values.get("auth", "") is None:
            values["auth"] = ""  # null removes the header, as "" does
        if "subjects" in values:
            values["subjects"] = {subject: dict(spec) for subject, spec in values["subjects"].items()}
        return do_put_catalog(**values, actor=api_actor(self.context.get("request")))

    def update(self, instance: Catalog, validated_data: dict[str, Any]) -> Catalog:
        """A PATCH without `url` keeps the URL as stored (the representation shows it redacted)."""
        if self.partial and "url" not in validated_data:
            validated_data = {**validated_data, "url": instance.url}
        updated: Catalog = super().update(instance, validated_data)
        return updated


class CatalogViewSet(_NamedViewSet):
    queryset = Catalog.objects.prefetch_related("schemas")
    serializer_class = CatalogSerializer
    kind = "catalog"

    def delete_named(self, name: str) -> None:
        do_delete_catalog(name, actor=api_actor(self.request))


class TopicModelSerializer(TopicModelShape):
    """The topic model shape; `do_put_topic_model` checks the rest and names the bad field."""

    def to_representation(self, instance: TopicModel) -> dict[str, Any]:
        return topic_model_representation(instance)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        topic = self.context.get("topic")
        if topic is not None and attrs.get("topic", topic) != topic:
            raise serializers.ValidationError({"topic": ["A topic model keeps its topic: create another instead."]})
        if topic is None and "topic" not in attrs:
            raise serializers.ValidationError({"topic": ["A topic model needs its topic (a name or a pattern)."]})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> TopicModel:
        values = {"topic": self.context.get("topic"), **validated_data}
        for side in ("key", "value"):
            if values.get(side) is not None:
                values[side] = dict(values[side])
        try:
            return do_put_topic_model(**values, actor=api_actor(self.context.get("request")))
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None

    def update(self, instance: TopicModel, validated_data: dict[str, Any]) -> TopicModel:
        """A full update replaces (a side left out: raw bytes); a partial one merges."""
        values = topic_model_representation(instance) if self.partial else {"topic": instance.topic}
        return self.create({**values, **validated_data})


class TopicModelViewSet(viewsets.ModelViewSet[TopicModel]):
    """Topic models by topic: `POST` creates (a taken topic is refused), `PUT` creates or replaces."""

    queryset = TopicModel.objects.select_related("key_catalog", "value_catalog")
    serializer_class = TopicModelSerializer
    lookup_field = "topic"
    lookup_value_regex = TOPIC_REGEX

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        topic = request.data.get("topic") if isinstance(request.data, dict) else None
        if isinstance(topic, str) and self.get_queryset().filter(topic=topic).exists():
            raise serializers.ValidationError(
                {"topic": [f"A topic model of {topic!r} exists: PUT {request.path}{topic}/ replaces it."]}
            )
        return super().create(request, *args, **kwargs)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """PUT creates the topic model if there is none; PATCH needs one."""
        partial = kwargs.pop("partial", False)
        topic = kwargs[self.lookup_field]
        instance = self.get_queryset().filter(topic=topic).first()
        if instance is None and partial:
            raise Http404
        if instance is None:
            require(request.user, model_permissions(TopicModel, "add"))
        serializer = TopicModelSerializer(
            instance, data=request.data, partial=partial, context={**self.get_serializer_context(), "topic": topic}
        )
        serializer.is_valid(raise_exception=True)
        serializer.save()
        return Response(serializer.data, status=status.HTTP_201_CREATED if instance is None else status.HTTP_200_OK)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        do_delete_topic_model(self.get_object().topic, actor=api_actor(request))  # nothing depends on one
        return Response(status=status.HTTP_204_NO_CONTENT)

    def get_queryset(self) -> QuerySet[TopicModel]:
        return TopicModel.objects.select_related("key_catalog", "value_catalog").order_by("topic")
