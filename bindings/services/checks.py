"""What every write function shares: its shape check and the collecting of errors keyed by field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from rest_framework.serializers import Serializer

from bindings.shapes import problems

Errors = dict[str, list[str]]


def check_shape(shape: type[Serializer[Any]], values: Mapping[str, Any], errors: Errors | None = None) -> None:
    """`values` against their shape (`bindings.shapes`): wrong types and sizes are added to `errors`, or raised
    when there is no `errors` to collect them in."""
    found = problems(shape(data=dict(values)))
    if errors is None and found:
        raise ValidationError(found)
    for key, messages in found.items():
        add(errors if errors is not None else {}, key, messages)


def add(errors: Errors, key: str, messages: Sequence[str] | str) -> None:
    errors.setdefault(key, []).extend([messages] if isinstance(messages, str) else messages)


def collect(errors: Errors, exc: ValidationError, prefix: str, names: Mapping[str, str] | None = None) -> None:
    """Merge `exc` into `errors`, its field names renamed by `names` and put after `prefix`."""
    for field, messages in exc.message_dict.items():
        if field == NON_FIELD_ERRORS:
            key = prefix or NON_FIELD_ERRORS
        else:
            name = (names or {}).get(field, field)
            key = f"{prefix}.{name}" if prefix else name
        add(errors, key, messages)
