"""zilla.yaml over the API: `POST /api/v1/import/zilla` and `GET /api/v1/export/zilla`.

Authentication is the API's (REST_FRAMEWORK); the import needs the add and change permissions of endpoints,
guards and routes (and delete_route with `?prune=true`), the export their view permissions (bindings.api.permissions).
The import takes the YAML as the body (application/yaml, text/yaml, application/x-yaml or text/plain) or as JSON
`{"yaml": "..."}`; `?dry_run=true` answers the changes without writing, `?prune=true` also deletes the routes the
file does not have. Bad input is a 400 problem whose `errors` are keyed by where in the file the problem is
(`bindings.<binding>.routes[0].with.topic`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from bindings.api.parsers import JSONParser
from bindings.api.permissions import configuration_permissions, reading, require
from bindings.api.problems import PROBLEM_CONTENT_TYPE, JsonErrorsView, problem, query_flag, summary
from bindings.history import Actor
from bindings.shapes import unknown_keys
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla

YAML_CONTENT_TYPE = "application/yaml"
MAX_YAML_BYTES = 1024 * 1024  # a zilla.yaml is a few kilobytes; refuse before parsing anything huge


class YamlParser(BaseParser):
    """The body as text (UTF-8), parsed later by the import, which names where a problem is."""

    media_type = YAML_CONTENT_TYPE

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        data = stream.read(MAX_YAML_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_YAML_BYTES:
            raise ParseError(f"A zilla.yaml of more than {MAX_YAML_BYTES} bytes is not imported.")
        try:
            return str(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not UTF-8 text: {exc}") from None


class TextYamlParser(YamlParser):
    media_type = "text/yaml"


class XYamlParser(YamlParser):
    media_type = "application/x-yaml"


class PlainTextParser(YamlParser):
    media_type = "text/plain"


def _flag(request: Request, name: str) -> bool:
    return query_flag(request, name) is True


def _bad_request(errors: dict[str, list[str]]) -> Response:
    body = problem(status.HTTP_400_BAD_REQUEST, summary(errors), errors)
    return Response(body, status=status.HTTP_400_BAD_REQUEST, content_type=PROBLEM_CONTENT_TYPE)


class YamlTextRenderer(BaseRenderer):
    """Lets a client ask for `application/yaml`; the export view answers the text itself."""

    media_type = YAML_CONTENT_TYPE
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        return str(data).encode()


_YAML_BODY = dict.fromkeys((YAML_CONTENT_TYPE, "text/yaml", "application/x-yaml"), OpenApiTypes.STR)
JSON_KEY = "yaml"
_JSON_BODY = {
    "type": "object",
    "properties": {JSON_KEY: {"type": "string", "description": "The zilla.yaml, as text."}},
    "required": [JSON_KEY],
    "additionalProperties": False,
}


class ZillaImportView(JsonErrorsView):
    """Import a zilla.yaml: 200 with what was (or, in a dry run, would be) created, updated, unchanged,
    deleted and ignored; 400 naming the binding, route or guard and the field."""

    parser_classes: ClassVar[list[type[BaseParser]]] = [  # type: ignore[misc]
        YamlParser,
        TextYamlParser,
        XYamlParser,
        PlainTextParser,
        JSONParser,
    ]

    renderer_classes: ClassVar[list[type[BaseRenderer]]] = [JSONRenderer]  # type: ignore[misc]
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = {
        **reading(*configuration_permissions("view")),
        "POST": configuration_permissions("add", "change"),
    }

    @extend_schema(
        operation_id="zilla_import",
        tags=["zilla"],
        summary="Create or replace endpoints, jwt guards and sse-kafka routes from a zilla.yaml (all or nothing)",
        parameters=[
            OpenApiParameter("dry_run", bool, description="Report what would change; write nothing."),
            OpenApiParameter("prune", bool, description="Also delete the routes the file does not have."),
        ],
        request={**_YAML_BODY, "text/plain": OpenApiTypes.STR, "application/json": _JSON_BODY},
        responses={200: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        data = request.data
        if isinstance(data, Mapping):
            unknown = unknown_keys(data, [JSON_KEY])  # `prune` or `dry_run` here would be dropped: they are queries
            if unknown:
                return _bad_request(unknown)
            text = data.get(JSON_KEY)
            if not isinstance(text, str):
                return _bad_request({"yaml": ['Send the zilla.yaml as the body, or as JSON {"yaml": "..."}.']})
        elif isinstance(data, str):
            text = data
        else:
            return _bad_request({"yaml": ["Send the zilla.yaml as the body, e.g. with content-type application/yaml."]})
        actor = Actor.of(request.user, "import")
        prune = _flag(request, "prune")
        if prune:
            require(request.user, ["bindings.delete_route"])
        try:
            result = do_import_zilla(text, actor=actor, dry_run=_flag(request, "dry_run"), prune=prune)
        except ZillaConfigError as exc:
            return _bad_request(exc.errors)
        return Response(result.as_dict())


class ZillaExportView(JsonErrorsView):
    """The configuration as a zilla.yaml; `?strict=true` writes Zilla's schema only. Notes (our extensions,
    or what strict left out) lead the file as comments."""

    renderer_classes: ClassVar[list[type[BaseRenderer]]] = [YamlTextRenderer, JSONRenderer]  # type: ignore[misc]
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = reading(*configuration_permissions("view"))

    @extend_schema(
        operation_id="zilla_export",
        tags=["zilla"],
        summary="The configuration as a zilla.yaml",
        parameters=[OpenApiParameter("strict", bool, description="Zilla's schema only: leave out our extensions.")],
        # The YAML text is a document (an object), as clients that parse YAML, like schemathesis, read it.
        responses={(200, YAML_CONTENT_TYPE): OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> HttpResponse:
        text, notes = export_zilla(strict=_flag(request, "strict"))
        header = "".join("# " + " ".join(note.split()) + "\n" for note in notes)  # a note never breaks the YAML
        return HttpResponse(header + text, content_type=f"{YAML_CONTENT_TYPE}; charset=utf-8")
