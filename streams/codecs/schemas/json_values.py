"""JSON records: parsed, checked against their JSON Schema when the model has one, and written back compact.

JSON Schema documents of any draft are read by the `jsonschema` library, which picks the draft from `$schema`;
one without `$schema` is read as draft 7, the draft Confluent's JSON Schema serializers write. Formats (`format:
email`, …) are annotations only, as the drafts say by default.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.jsonschema

from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: bytes | memoryview) -> Any:
    """The JSON value of a record; `not-json` for anything else (NaN and Infinity included)."""
    try:
        return json.loads(bytes(raw), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise DecodeError(Reason.NOT_JSON, str(exc)[:200]) from None


class JsonSchemaChecker:
    """One JSON Schema (and the schemas it references by name), ready to check values against."""

    def __init__(self, text: str, references: tuple[tuple[str, str], ...] = ()) -> None:
        schema = _document(text)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise SchemaError(f"not a JSON Schema: {exc.message}") from None
        draft = referencing.jsonschema.specification_with(
            cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT7
        )
        resources = [
            (name, referencing.Resource.from_contents(_document(imported), default_specification=draft))
            for name, imported in references
        ]
        registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
        self._validator = cls(schema, registry=registry)

    def check(self, value: Any) -> None:
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"at /{where}: {error.message}"[:300])


def _document(text: str) -> Any:
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"a JSON Schema must be JSON: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise SchemaError("a JSON Schema is an object or a boolean")
    return schema


@lru_cache(maxsize=256)
def checker(text: str, references: tuple[tuple[str, str], ...] = ()) -> JsonSchemaChecker:
    return JsonSchemaChecker(text, references)
