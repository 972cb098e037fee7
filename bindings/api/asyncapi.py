"""REST API for AsyncAPI 3.0: `GET /api/v1/asyncapi.yaml` (the routes as a document) and
`POST /api/v1/import/asyncapi` (a document's SSE channels as routes).

Both use the API's authentication (REST_FRAMEWORK settings); the export needs the view permissions of endpoints,
guards and routes, the import their add and change permissions (bindings.api.permissions).
Errors are the API's problem bodies (JSON whatever was asked for); a 400's `errors` maps where each problem is
in the document (`channels.items.x-sse-kafka.topic`) to its messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.api.permissions import configuration_permissions, reading
from bindings.api.problems import JsonErrorsView, query_flag
from bindings.asyncapi.document import AsyncApiImportError, dump_yaml, export_asyncapi, import_asyncapi, parse_document
from bindings.history import Actor


class YAMLRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        return dump_yaml(data).encode()


class AsyncApiExportView(JsonErrorsView):
    """The AsyncAPI 3.0 document of every route: YAML, or JSON with `?format=json` or `Accept: application/json`.

    The server URL is the one the request came to, unless `?server=https://sse.example.com` says otherwise (the
    API may be reached on an internal address that browsers do not use).
    """

    renderer_classes = (YAMLRenderer, JSONRenderer)
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = reading(*configuration_permissions("view"))

    @extend_schema(
        operation_id="asyncapi_export",
        tags=["asyncapi"],
        summary="The AsyncAPI 3.0 document of every route",
        parameters=[
            OpenApiParameter(
                "server", str, description="The platform's base URL in the document; default: the one asked on."
            ),
            OpenApiParameter("format", str, enum=["yaml", "json"], description="JSON instead of YAML."),
        ],
        responses={(200, "application/yaml"): OpenApiTypes.OBJECT, (200, "application/json"): OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        server = request.query_params.get("server") or request.build_absolute_uri("/")
        try:
            document = export_asyncapi(server)
        except ValueError as exc:
            raise ValidationError({"server": [str(exc)]}) from None
        return Response(document)


class AsyncApiImportView(JsonErrorsView):
    """Create or replace the routes of an AsyncAPI 3 document's SSE channels, all or nothing.

    The body is the document, YAML or JSON; `?dry_run=1` validates and reports without writing. The answer lists
    the routes written and the channels ignored, with why.
    """

    parser_classes = ()  # the body is read as it is: YAML or JSON, parsed here so a bad one is a 400 on `document`
    renderer_classes = (JSONRenderer,)
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = {
        **reading(*configuration_permissions("view")),
        "POST": configuration_permissions("add", "change"),
    }

    @extend_schema(
        operation_id="asyncapi_import",
        tags=["asyncapi"],
        summary="Create or replace routes from an AsyncAPI 3 document's SSE channels (all or nothing)",
        parameters=[OpenApiParameter("dry_run", bool, description="Validate and report; write nothing.")],
        request={"application/yaml": OpenApiTypes.OBJECT, "application/json": OpenApiTypes.OBJECT},
        responses={200: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        dry_run = query_flag(request, "dry_run")
        if dry_run is None:
            raise ValidationError({"dry_run": ["Give dry_run=1 (validate and report only) or dry_run=0."]})
        try:
            document = parse_document(request.body, is_json="json" in (request.content_type or ""))
            result = import_asyncapi(document, dry_run=dry_run, actor=Actor.of(request.user, "api"))
        except AsyncApiImportError as exc:
            raise ValidationError(exc.errors) from None
        return Response(result.as_dict())
