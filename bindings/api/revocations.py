"""REST API for revocations (`/api/v1/revocations/`): list, revoke (`POST`), read, move the end or reword the reason
(`PATCH`), lift (`DELETE`). Keyed by id: a revocation has no name. Writes go through `bindings.services`, which
validates as the admin does, records the history and tells every web process."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.api.resources import _as_api_error, api_actor
from bindings.models.revocation import Revocation, revocation_representation
from bindings.services import do_change_revocation, do_delete_revocation, do_revoke
from bindings.shapes import RevocationShape

FIXED = ("guard", "identity", "jti")  # what a revocation covers, set when it is made


class RevocationSerializer(RevocationShape):
    """The revocation shape; `bindings.services` checks the rest (exactly one of identity and jti, a future
    `until`, a guard that exists) and names the bad field."""

    def to_representation(self, instance: Revocation) -> dict[str, Any]:
        return revocation_representation(instance)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            # Sent back as they are (a GET's body PATCHed again) they change nothing; another value is refused.
            shown = revocation_representation(self.instance)
            fixed = sorted(field for field in FIXED if attrs.get(field, shown[field]) != shown[field])
            if fixed:
                message = "What a revocation covers is fixed: lift it (DELETE) and make another."
                raise serializers.ValidationError({field: [message] for field in fixed})
            attrs = {field: value for field, value in attrs.items() if field not in FIXED}
        elif not self.partial:
            required = {"guard": "A revocation names its guard.", "until": "A revocation needs its end (until)."}
            missing = {field: [message] for field, message in required.items() if field not in attrs}
            if missing:
                raise serializers.ValidationError(missing)
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Revocation:
        try:
            return do_revoke(**validated_data, actor=api_actor(self.context.get("request")))
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None

    def update(self, instance: Revocation, validated_data: dict[str, Any]) -> Revocation:
        values = {"until": instance.until, "reason": instance.reason, **validated_data}
        try:
            changed = do_change_revocation(instance.pk, **values, actor=api_actor(self.context.get("request")))
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None
        if changed is None:  # lifted meanwhile
            raise Http404
        return changed


class RevocationViewSet(viewsets.ModelViewSet[Revocation]):
    """Revocations, newest first. `PATCH` moves `until` (sooner lifts it sooner) or rewords `reason`; what it
    covers (guard, identity, jti) is fixed."""

    queryset = Revocation.objects.all()
    serializer_class = RevocationSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]  # noqa: RUF012  (DRF's own type)

    def get_queryset(self) -> QuerySet[Revocation]:
        return Revocation.objects.select_related("guard").order_by("-created_at", "-id")

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        do_delete_revocation(instance.pk, actor=api_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
