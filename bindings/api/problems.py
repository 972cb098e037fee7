"""Every API error as an RFC 9457 problem body (`application/problem+json`).

One shape for all of them, so a provisioning script needs one error path: `type`, `title` (the status phrase),
`status`, `detail` (one human sentence) and `errors`, which maps each bad field to its messages with the keys the
services use (`topic`, `paths[1]`, `filters[0].key`, ...), empty when no field is at fault.

DRF errors go through `exception_handler` (set as REST_FRAMEWORK's EXCEPTION_HANDLER); Django's own 400, 403,
404 and 500 pages (a URL no view matches, a body too big, a crash) come from the `handler*` views below, which
answer problems under `/api/` and Django's usual pages elsewhere.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

PROBLEM_CONTENT_TYPE = "application/problem+json"
API_PREFIX = "/api/"
DATABASE_DOWN = (OperationalError, InterfaceError)
# Only the status says what went wrong; the title is its phrase, as RFC 9457 asks for "about:blank".
PROBLEM_TYPE = "about:blank"
DETAIL_MAX_CHARS = 500

Errors = dict[str, list[str]]


TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})


def query_flag(request: Request, name: str) -> bool | None:
    """A yes/no query parameter: True, False (also when absent), or None for a word that is neither."""
    text = str(request.query_params.get(name, "")).lower()
    return True if text in TRUE_WORDS else False if text in FALSE_WORDS else None


class JsonErrorsView(APIView):
    """A view that may answer YAML: its errors (401, 403, 406, ...) are JSON problems even when YAML was asked
    for."""

    def handle_exception(self, exc: Exception) -> Response:
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)


class Conflict(exceptions.APIException):
    """The request is valid but the current state forbids it (routes still use what it would delete)."""

    status_code = 409
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def printable(text: str) -> str:
    """`text` with lone surrogates (from a JSON or YAML `\\udXXX` escape) spelled out as escapes: UTF-8 cannot
    encode them, so a message quoting the bad input would otherwise fail to render, a 500."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def problem(status: int, detail: str, errors: Errors | None = None) -> dict[str, Any]:
    return {
        "type": PROBLEM_TYPE,
        "title": _phrase(status),
        "status": status,
        "detail": printable(detail),
        "errors": {
            printable(field): [printable(message) for message in messages] for field, messages in (errors or {}).items()
        },
    }


def flatten_errors(detail: object, prefix: str = "") -> Errors:
    """DRF's nested error detail as flat field keys: list indexes in brackets, nested fields after a dot.

    `{"paths": {1: [...]}}` (a ListField's child) becomes `paths[1]`, `{"value": {"path": [...]}}` becomes
    `value.path`, so serializer errors read like the services' own keys.
    """
    errors: Errors = {}

    def merge(found: Errors) -> None:
        for key, messages in found.items():
            errors.setdefault(key, []).extend(messages)

    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if isinstance(key, int):
                name = f"{prefix}[{key}]"
            elif key in (NON_FIELD_ERRORS, api_settings.NON_FIELD_ERRORS_KEY):
                name = prefix or api_settings.NON_FIELD_ERRORS_KEY
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            merge(flatten_errors(value, name))
    elif isinstance(detail, list | tuple):
        for index, item in enumerate(detail):
            if isinstance(item, Mapping | list | tuple):
                if item:  # a valid item of a many=True serializer has an empty dict
                    merge(flatten_errors(item, f"{prefix}[{index}]"))
            else:
                merge({prefix or api_settings.NON_FIELD_ERRORS_KEY: [str(item)]})
    else:
        errors[prefix or api_settings.NON_FIELD_ERRORS_KEY] = [str(detail)]
    return errors


def summary(errors: Errors) -> str:
    """One sentence for `detail`: each field's first message."""
    parts = [
        messages[0] if field == api_settings.NON_FIELD_ERRORS_KEY else f"{field}: {messages[0]}"
        for field, messages in errors.items()
        if messages
    ]
    text = " ".join(part if part.endswith(".") else f"{part}." for part in parts) or "The request is not valid."
    return text if len(text) <= DETAIL_MAX_CHARS else text[: DETAIL_MAX_CHARS - 1] + "…"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler (status, `WWW-Authenticate`, `Retry-After`, rollback), its body replaced by a problem.

    A Django `ValidationError` that escaped a view is bad input too: a 400, never a 500. Anything else DRF does
    not know stays unhandled and reaches `server_error` as a 500 problem.
    """
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {api_settings.NON_FIELD_ERRORS_KEY: exc.messages}
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        detail = summary(errors)
    else:
        errors = {}
        data = response.data
        detail = str(data.get("detail", "")) if isinstance(data, Mapping) else str(data)
        detail = detail or _phrase(response.status_code)
    response.data = problem(response.status_code, detail, errors)
    renderer = getattr(context.get("request"), "accepted_renderer", None)
    # People in the browsable API keep its HTML page; machines get the problem media type.
    if renderer is None or getattr(renderer, "format", "json") == "json":
        response.content_type = PROBLEM_CONTENT_TYPE
    return response


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def problem_response(status: int, detail: str) -> JsonResponse:
    return JsonResponse(problem(status, detail), status=status, content_type=PROBLEM_CONTENT_TYPE)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, a bad Host, ...)."""
    if is_api(request):
        return problem_response(400, "The request could not be read (too large or malformed).")
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return problem_response(403, "You do not have permission to perform this action.")
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A URL no view matches, e.g. a mistyped collection or a name that is not a slug."""
    if is_api(request):
        return problem_response(404, f"Nothing at {request.path}: see /api/v1/ for the collections.")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500; a 503 with `retry-after` when the database cannot be reached (it is the outage, not us)."""
    if isinstance(sys.exc_info()[1], DATABASE_DOWN):  # Django calls this inside its `except`
        detail = "The configuration database cannot be reached; retry in a moment."
        response = problem_response(503, detail) if is_api(request) else HttpResponse(detail, status=503)
        response["Retry-After"] = "5"
        return response
    if is_api(request):
        return problem_response(500, "The server failed to answer; the error is logged.")
    return defaults.server_error(request)
