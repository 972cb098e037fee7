"""Route filters compiled against a request's params (docs/contract.md §1, §7).

Any filter matches; within one filter the key, every header, the value condition and the expression must all match
(the expression is evaluated last, and once per record however many streams share it: streams/routes/expressions.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bindings.patterns import render
from bindings.selectors import FilterSpec
from streams.kafka.client import Record
from streams.routes.expressions import ExpressionFilter, expression_filter

_MISSING = object()


@dataclass(frozen=True)
class CompiledFilter:
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    value_path: tuple[str, ...] | None
    value_equals: str | None
    expression: ExpressionFilter | None = None

    def matches(self, record: Record, value: Any) -> bool:
        """`value` is the record's value parsed as JSON (or _MISSING), parsed once for all filters."""
        if self.key is not None and record.key != self.key and not (record.key_json and _key_equals(record, self.key)):
            return False
        for name, expected in self.headers:
            if not any(k == name and v == expected for k, v in record.headers):
                return False
        if self.value_path is not None and not _value_equals(value, self.value_path, self.value_equals or ""):
            return False
        return self.expression is None or self.expression.matches(record)


def _key_equals(record: Record, expected: bytes) -> bool:
    """A key decoded by its key model is JSON: it matches as a value filter would (a string by its text, so a filter
    `k1` matches the key `"k1"`; a number by its JSON text)."""
    key = parse_json(record.key)
    return key is not _MISSING and _value_equals(key, (), expected.decode("utf-8", errors="replace"))


def _value_equals(value: Any, path: tuple[str, ...], expected: str) -> bool:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    if isinstance(value, str):
        return value == expected
    if isinstance(value, (dict, list)) or value is _MISSING:
        return False
    # Numbers, booleans and null compare by their JSON text: equals "3" matches 3, "true" matches true.
    return json.dumps(value) == expected


def compile_filters(
    specs: Sequence[FilterSpec], params: dict[str, str], guarded: dict[str, dict[str, str]] | None = None
) -> tuple[CompiledFilter, ...]:
    """The filters with their templates filled in from the request's params and what its guards granted."""
    return tuple(
        CompiledFilter(
            key=None if spec.key is None else render(spec.key, params, guarded).encode(),
            headers=tuple((name, render(value, params, guarded).encode()) for name, value in spec.headers),
            value_path=None if spec.value is None else tuple(spec.value.path.split(".")),
            value_equals=None if spec.value is None else render(spec.value.equals, params, guarded),
            expression=None if not spec.expression else expression_filter(spec.expression, params, guarded),
        )
        for spec in specs
    )


def parse_json(value: bytes | None) -> Any:
    if value is None:
        return _MISSING
    try:
        return json.loads(value)
    except ValueError:
        return _MISSING


def matches_any(filters: Sequence[CompiledFilter], record: Record) -> bool:
    """True when there are no filters or any of them matches the record."""
    if not filters:
        return True
    value = parse_json(record.value) if any(f.value_path is not None for f in filters) else _MISSING
    return any(f.matches(record, value) for f in filters)
