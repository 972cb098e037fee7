"""The API's body parser: JSON, refusing text Postgres cannot store with a 400 that names where it is, and JSON
nested deeper than any configuration object with a 400 (near the recursion limit it was a 500).

Postgres stores no NUL character in text or jsonb, and UTF-8 cannot encode a lone surrogate (JSON's `\\ud800`
escape without its pair); left to the database either would be a 500 from deep inside a write (a filter's key,
a JWK's `kid`, a header name ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError

NUL = "\x00"
NUL_MESSAGE = "Null characters are not allowed."
SURROGATE_MESSAGE = "Lone surrogates (a \\ud800-\\udfff escape without its pair) are not text and are not allowed."
MAX_DEPTH = 64  # a configuration object nests a few levels


def too_deep(data: object) -> bool:
    """Whether `data` nests past MAX_DEPTH: the parser stops only at the recursion limit, and what it gives back
    a little below that limit overflows it later, in a deeper stack (validation, the database driver)."""
    pending = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, Mapping):
            pending.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, list):
            pending.extend((inner, depth + 1) for inner in value)
    return False


def text_error(text: str) -> str | None:
    """Why `text` cannot be stored, or None if it can."""
    if NUL in text:
        return NUL_MESSAGE
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE_MESSAGE
    return None


def text_errors(data: object, path: str = "") -> dict[str, str]:
    """Where `data` holds text that cannot be stored, as field keys like `filters[0].key` -> why (a key's fault is
    its object's); the keys are printable even when the bad text is in one."""
    found: dict[str, str] = {}
    if isinstance(data, str):
        message = text_error(data)
        if message:
            found[path] = message
    elif isinstance(data, Mapping):
        for key, value in data.items():
            message = text_error(str(key))
            if message:
                found.setdefault(path, message)
                continue
            found.update(text_errors(value, f"{path}.{key}" if path else str(key)))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            found.update(text_errors(item, f"{path}[{index}]"))
    return found


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # `[[[…`: the parser's recursion limit, reached within a few kilobytes
            raise ParseError("JSON parse error - nested too deeply.") from None
        if too_deep(data):
            raise ParseError(f"JSON parse error - nested more than {MAX_DEPTH} levels deep.")
        found = text_errors(data)
        if found:
            raise ValidationError({path or "non_field_errors": [message] for path, message in found.items()})
        return data
