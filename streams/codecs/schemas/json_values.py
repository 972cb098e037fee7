"""JSON records: parsed, checked against their JSON Schema when the model has one, and written back compact.

JSON Schema documents of any draft are read by the `jsonschema` library, which picks the draft from `$schema`;
one without `$schema` is read as draft 7, the draft Confluent's JSON Schema serializers write. Formats (`format:
email`, …) are annotations only, as the drafts say by default.

What a record costs is bounded. Its text is measured before anything looks at its value (limits.py). Two keywords
whose cost `jsonschema` lets grow faster than the value are run here instead, through `jsonschema`'s documented
way of extending a draft's validator: `pattern` and `patternProperties` (and `additionalProperties`, which
matches property names against them) in RE2, linear in the text, where Python's `re` can backtrack
exponentially (`^(a+)+$`); `uniqueItems` by hashing each item once, where `jsonschema` compares pairs. A schema
whose patterns RE2 cannot run, or whose `$ref`s resolve to nothing, is refused (bindings/schemas.py).
A mismatch is reported by where it is and which keyword failed, never with the value (it reaches the logs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.jsonschema

from bindings.schemas import json_schema_bound_problems, linear_pattern
from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.limits import Limits
from streams.codecs.schemas.timing import schema_work


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: bytes | memoryview, limits: Limits) -> Any:
    """The JSON value of a record within `limits`; `not-json` for anything else (NaN and Infinity included)."""
    text = bytes(raw)
    limits.check_size(text)
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise DecodeError(Reason.TOO_LARGE, f"nested deeper than {limits.max_depth}") from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise DecodeError(Reason.NOT_JSON, str(exc)[:200]) from None
    limits.check_json(text)
    return value


@lru_cache(maxsize=1024)
def _pattern(pattern: str) -> Any:
    return linear_pattern(pattern)


def _is_string(validator: Any, instance: Any) -> bool:
    return bool(validator.is_type(instance, "string"))


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if _is_string(validator, instance) and not _pattern(pattern).search(instance):
        yield jsonschema.exceptions.ValidationError("does not match the pattern")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _pattern(pattern).search(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [_pattern(pattern) for pattern in schema.get("patternProperties", {})]
    extras = [name for name in instance if name not in known and not any(found.search(name) for found in patterns)]
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif additional is False and extras:
        yield jsonschema.exceptions.ValidationError(f"{len(extras)} properties not allowed")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield jsonschema.exceptions.ValidationError("has non-unique elements")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """A hashable form of a JSON value equal for values JSON Schema calls equal: 1 and 1.0 alike, true and 1 not,
    objects whatever their members' order. The value's depth is bounded already (`Limits`)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((name, _canonical(item)) for name, item in value.items()))
    return ("z", None)


_BOUNDED_KEYWORDS = {
    "pattern": _pattern_keyword,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


class JsonSchemaChecker:
    """One JSON Schema (and the schemas it references by name), ready to check values against."""

    def __init__(self, text: str, references: tuple[tuple[str, str], ...] = ()) -> None:
        with schema_work():
            self._compile(text, references)

    def _compile(self, text: str, references: tuple[tuple[str, str], ...]) -> None:
        schema = _document(text)
        draft = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        try:
            draft.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise SchemaError(f"not a JSON Schema: {exc.message}") from None
        imported = tuple((name, _document(text)) for name, text in references)
        if problems := json_schema_bound_problems(schema, imported):
            raise SchemaError(" ".join(problems))
        keywords = {name: check for name, check in _BOUNDED_KEYWORDS.items() if name in draft.VALIDATORS}
        cls = jsonschema.validators.extend(draft, keywords)  # type: ignore[no-untyped-call]
        specification = referencing.jsonschema.specification_with(
            cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT7
        )
        resources = [
            (name, referencing.Resource.from_contents(document, default_specification=specification))
            for name, document in imported
        ]
        registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
        self._validator = cls(schema, registry=registry)

    def check(self, value: Any) -> None:
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is not None:  # the keyword and the place, not jsonschema's message: it quotes the value
            where = "/".join(str(part) for part in error.absolute_path)
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"at /{where}: fails `{error.validator}`"[:300])


def _document(text: str) -> Any:
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"a JSON Schema must be JSON: {exc}") from None
    except RecursionError:
        raise SchemaError("a JSON Schema nested too deep to read") from None
    if not isinstance(schema, dict | bool):
        raise SchemaError("a JSON Schema is an object or a boolean")
    return schema


@lru_cache(maxsize=256)
def checker(text: str, references: tuple[tuple[str, str], ...] = ()) -> JsonSchemaChecker:
    return JsonSchemaChecker(text, references)
