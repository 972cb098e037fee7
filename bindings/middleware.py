"""The API's body bound: a request whose body is over `DATA_UPLOAD_MAX_MEMORY_SIZE` is a 413 problem before any
view reads it. (DRF parses `request.stream` itself, past Django's own check of that setting.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from bindings.api.problems import is_api, problem_response

Handler = Callable[[HttpRequest], HttpResponse] | Callable[[HttpRequest], Awaitable[HttpResponse]]


def too_large(request: HttpRequest) -> HttpResponse | None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return problem_response(400, "Content-Length is not a number.")
    if limit is not None and is_api(request) and length > limit:
        return problem_response(413, f"The body is {length} bytes; the API takes at most {limit} (API_MAX_BODY_BYTES).")
    return None


@sync_and_async_middleware
def api_body_limit(get_response: Handler) -> Handler:
    if iscoroutinefunction(get_response):

        async def asynchronous(request: HttpRequest) -> HttpResponse:
            return too_large(request) or await get_response(request)

        return asynchronous

    def synchronous(request: HttpRequest) -> HttpResponse:
        return too_large(request) or get_response(request)  # type: ignore[return-value]

    return synchronous
