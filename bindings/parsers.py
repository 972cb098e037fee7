"""The API's body parser: JSON, refusing NUL characters with a 400 that names where they are.

Postgres stores no NUL character in text or jsonb, so a body carrying one can never be saved; left to the
database it would be a 500 from deep inside a write (a filter's key, a JWK's `kid`, a header name ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ValidationError

NUL = "\x00"
NUL_MESSAGE = "Null characters are not allowed."


def nul_paths(data: object, path: str = "") -> list[str]:
    """Where `data` holds a NUL character, as field keys like `filters[0].key` (a key's own dict if in a key)."""
    found: list[str] = []
    if isinstance(data, str):
        if NUL in data:
            found.append(path)
    elif isinstance(data, Mapping):
        for key, value in data.items():
            if NUL in str(key):
                found.append(path)
                continue
            found.extend(nul_paths(value, f"{path}.{key}" if path else str(key)))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            found.extend(nul_paths(item, f"{path}[{index}]"))
    return found


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        found = nul_paths(data)
        if found:
            raise ValidationError({path or "non_field_errors": [NUL_MESSAGE] for path in dict.fromkeys(found)})
        return data
