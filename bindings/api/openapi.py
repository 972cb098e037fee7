"""What drf-spectacular cannot infer about the API, so the OpenAPI schema matches what it really does.

- A route's `filters` are checked by `bindings.services` (which names the bad field), so the serializer takes
  them as raw JSON; `RouteSerializerExtension` documents their real shape (`bindings.shapes.FilterShape`, the
  one the services check them with).
- Every representation carries all its fields: `mark_response_fields_required` says so for response bodies.
- `close_request_bodies` says that a request body holds the declared fields only (`additionalProperties: false`).
- `add_problem_responses` documents the problem bodies (`bindings.api.problems`) each operation can answer, and the
  201 of a `PUT` that creates.

`AutoSchema` is REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS; importing this module with it registers the extension.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema

from bindings.api.problems import PROBLEM_CONTENT_TYPE
from bindings.shapes import FilterShape

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An error, as RFC 9457 problem details.",
    "properties": {
        "type": {"type": "string", "description": "about:blank: the status says what went wrong."},
        "title": {"type": "string", "description": "The status phrase, e.g. Bad Request."},
        "status": {"type": "integer", "description": "The HTTP status code."},
        "detail": {"type": "string", "description": "What went wrong, for people."},
        "errors": {
            "type": "object",
            "description": (
                "Bad field -> messages; keys like topic, paths[1], filters[0].key; empty if no field is at fault."
            ),
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["type", "title", "status", "detail", "errors"],
}

PROBLEM_DESCRIPTIONS = {
    "400": "Bad input: `errors` names each bad field, of the body or of a query parameter (`range` for a time range).",
    "401": "No credentials or bad ones: send `Authorization: Token <key>` (see `manage.py api_token`).",
    "403": "Signed in without the right: readers (group api-readers) read, staff write.",
    "404": "No such object, no such URL, or a `?format=` the API does not write (DRF's format override).",
    "406": "The Accept header names no media type the API writes (it writes JSON).",
    "409": "Routes (or, for a catalog, topic models) still use it: move or delete them first.",
    "415": "The body's media type is not one the operation reads (JSON, unless it says otherwise).",
}
# Deleting an endpoint or a guard that routes use is refused; a route can always be deleted.
CONFLICT_ON_DELETE = ("/api/v1/endpoints/{name}/", "/api/v1/guards/{name}/", "/api/v1/catalogs/{name}/")


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's, unchanged: named in the settings so that this module (and its extension) is loaded."""


# drf-spectacular registers an extension in its (untyped) __init_subclass__.
class RouteSerializerExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    target_class = "bindings.api.resources.RouteSerializer"

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        component = auto_schema.resolve_serializer(FilterShape, direction)
        schema["properties"]["filters"] = {
            "type": "array",
            "items": component.ref,
            "description": "Filters: a message is sent if it passes any one (none: every message).",
        }
        return schema


def mark_response_fields_required(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Response components list every property as required: representations never leave a field out."""
    for name, schema in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") or "properties" not in schema:
            continue
        schema["required"] = list(schema["properties"])
    return result


READ_ONLY_BACK = "Read-only: accepted back as a GET shows it (a round trip), and ignored."


def close_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Request components say `additionalProperties: false`: every shape refuses a field it does not know
    (`bindings.shapes.Shape`). The read-only fields of the object's representation are listed too, marked
    `readOnly`, since a GET's body written back is accepted."""
    schemas = result.get("components", {}).get("schemas", {})
    for name, schema in schemas.items():
        if not name.endswith("Request") or "properties" not in schema:
            continue
        shown = schemas.get(name.removeprefix("Patched").removesuffix("Request"), {}).get("properties", {})
        for field in [field for field in shown if field not in schema["properties"]]:
            schema["properties"][field] = {"readOnly": True, "description": READ_ONLY_BACK}
        schema["additionalProperties"] = False
    return result


def _has_query(operation: dict[str, Any]) -> bool:
    return any(parameter.get("in") == "query" for parameter in operation.get("parameters", []))


def add_problem_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The problem body under each error status an operation can answer; 201 next to 200 for a `PUT`."""
    result.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    problem = {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            statuses = ["401", "403", "404", "406"]
            if method in ("post", "put", "patch"):
                statuses += ["400", "415"]
            elif method == "get" and ("{" not in path or _has_query(operation)):
                statuses.append("400")  # a bad filter value or query parameter
            if method == "delete" and path in CONFLICT_ON_DELETE:
                statuses.append("409")
            if method == "put" and "200" in responses:
                responses.setdefault(
                    "201", {**responses["200"], "description": "Created: there was none by that name."}
                )
            for status in sorted(statuses):
                responses.setdefault(status, {"description": PROBLEM_DESCRIPTIONS[status], "content": problem})
    return result
