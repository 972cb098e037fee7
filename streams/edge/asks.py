"""What a stream request asks beyond its route, read from its query string (docs/contract.md §5, §7): where to start
(`since`) and how to shape what it is sent (`fields`, `conflate_ms`, `delta`). A request may narrow what its route sends
(fewer fields, a longer interval), never widen it: anything else is a `400` problem naming the parameter and the
value at fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from bindings.pointers import PointerError, narrower, parse_pointer
from bindings.selectors import MAX_CONFLATE_MS, RouteSpec
from streams.codecs.asgi import Scope
from streams.edge.http import since_param
from streams.stream.opening import Shaping

MERGE_PATCH = "merge-patch"  # RFC 7396, the one delta format


class AskError(ValueError):
    """A query parameter the stream cannot honour: `parameter` names it, the message says why."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class Asks:
    since_ms: int | None
    shaping: Shaping


def stream_asks(scope: Scope, route: RouteSpec) -> Asks:
    """The request's `since` and shaping under `route`; AskError if a parameter cannot be honoured."""
    try:
        since_ms = since_param(scope)
    except ValueError as exc:
        raise AskError("since", str(exc)) from None
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    fields = _fields(query.get("fields"), route)
    conflate_ms = _conflate_ms(query.get("conflate_ms"), route)
    return Asks(since_ms, Shaping(fields=fields, conflate_ms=conflate_ms, delta=_delta(query.get("delta"))))


def _delta(values: list[str] | None) -> str:
    """The client's `?delta=`: `merge-patch`, or none."""
    if values is None:
        return ""
    if values[-1] != MERGE_PATCH:
        raise AskError("delta", f"delta: {values[-1]!r} is not a delta format this server sends; ask {MERGE_PATCH!r}.")
    return MERGE_PATCH


def _conflate_ms(values: list[str] | None, route: RouteSpec) -> int:
    """The client's `?conflate_ms=`, no shorter than the route's; the route's without it."""
    if values is None:
        return route.conflate_ms
    text = values[-1]
    if not text.isdigit() or int(text) > MAX_CONFLATE_MS:
        raise AskError(
            "conflate_ms", f"conflate_ms: {text!r} is not a whole number of milliseconds up to {MAX_CONFLATE_MS}."
        )
    asked = int(text)
    if asked < route.conflate_ms:
        raise AskError("conflate_ms", f"conflate_ms: {asked} is shorter than this route's {route.conflate_ms}.")
    return asked


def _fields(values: list[str] | None, route: RouteSpec) -> tuple[str, ...]:
    """The client's `?fields=` (comma-separated, or repeated), each one of the route's; the route's without it."""
    if values is None:
        return route.fields
    asked = [text for value in values for text in value.split(",") if text]
    if not asked:
        raise AskError("fields", "`fields` lists JSON Pointers, e.g. ?fields=/price,/item/name.")
    for text in asked:
        try:
            parse_pointer(text)
        except PointerError as exc:
            raise AskError("fields", f"fields: {exc}") from None
    wider = narrower(asked, route.fields)
    if wider is not None:
        allowed = ", ".join(route.fields)
        raise AskError("fields", f"fields: {wider!r} is not one of this route's fields ({allowed}).")
    return tuple(dict.fromkeys(asked))
