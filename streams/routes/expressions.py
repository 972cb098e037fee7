"""A route filter's CEL `expression` on the data plane: compiled once per text in a process, evaluated once per
record for each set of variables (docs/contract.md §7, docs/data-plane.md "Filters").

Streams of one route whose path parameters and guard values are the same share one `ExpressionFilter` (the
process keeps one per expression and variables while a stream holds it), and it remembers its verdict on the
records it saw last: a thousand streams at different places in a topic evaluate each record once, not a thousand
times. The variables are handed to the library as values, never spliced into the text. A record on which the
expression fails (a missing field, a type mismatch, a result that is not a boolean) does not match; it is counted
(`sse_filter_expression_failures_total`) and logged at most once a minute per expression, and the stream goes on.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar

import cel_expr_python.cel as cel  # noqa: PLR0402 - mypy reads the stubs of a folder without __init__ only so

from bindings.expressions import GUARDED, HEADERS, KEY, PARAMS, VALUE, compile_expression
from streams.kafka.client import Record

log = logging.getLogger(__name__)

MEMO_RECORDS = 4096  # verdicts kept per filter: more than a fan-out's batch, few enough to stay cheap
LOG_EVERY_S = 60.0


class ExpressionStats:
    """Records on which an expression failed, in this process (the metrics hand them to prometheus)."""

    failures: ClassVar[int] = 0


@lru_cache(maxsize=1024)
def compiled(source: str) -> cel.Expression:
    """The expression compiled, once per text in the process (it was checked when the route was saved)."""
    return compile_expression(source)


def decoded(data: bytes | None, *, is_json: bool = True) -> Any:
    """What a filter's expression sees of a key or value: its JSON, else its text; null for none."""
    if data is None:
        return None
    if is_json:
        try:
            return json.loads(data)
        except ValueError:
            pass
    return data.decode("utf-8", errors="replace")


def guard_variables(guarded: Mapping[str, Mapping[str, str]] | None) -> dict[str, dict[str, Any]]:
    """The grants' values (`identity`, `attributes.<name>`) as the expression reads them:
    `guarded.<guard>.identity`, `guarded.<guard>.attributes.<name>`."""
    found: dict[str, dict[str, Any]] = {}
    for guard, values in (guarded or {}).items():
        attributes = {k.removeprefix("attributes."): v for k, v in values.items() if k.startswith("attributes.")}
        entry: dict[str, Any] = {"attributes": attributes}
        if "identity" in values:
            entry["identity"] = values["identity"]
        found[guard] = entry
    return found


class ExpressionFilter:
    """One expression with one set of path parameters and guard values; shared, and hashed by identity."""

    __slots__ = ("__weakref__", "_expression", "_guarded", "_last_logged", "_memo", "_params", "source")

    def __init__(self, source: str, params: Mapping[str, str], guarded: dict[str, dict[str, Any]]) -> None:
        self.source = source
        self._expression = compiled(source)
        self._params = dict(params)
        self._guarded = guarded
        self._memo: dict[int, tuple[Record, bool]] = {}  # id(record) -> (the record, held so the id stays its)
        self._last_logged = 0.0

    def matches(self, record: Record) -> bool:
        seen = self._memo.get(id(record))
        if seen is not None and seen[0] is record:
            return seen[1]
        verdict = self._evaluate(record)
        if len(self._memo) >= MEMO_RECORDS:
            self._memo.clear()
        self._memo[id(record)] = (record, verdict)
        return verdict

    def _evaluate(self, record: Record) -> bool:
        headers: dict[str, str] = {}
        for name, value in record.headers:
            headers.setdefault(name, "" if value is None else value.decode("utf-8", errors="replace"))
        data = {
            VALUE: decoded(record.value),
            KEY: decoded(record.key),
            HEADERS: headers,
            PARAMS: self._params,
            GUARDED: self._guarded,
        }
        try:
            result = self._expression.eval(data=data)
            if result.type() == cel.Type.BOOL:
                return bool(result.value())
            why = str(result.value()) if result.type() == cel.Type.ERROR else f"gave {result.type().name().lower()}"
        except Exception as exc:  # whatever the library raises on one record ends no stream
            why = f"{type(exc).__name__}: {exc}"
        self._failed(record, why)
        return False

    def _failed(self, record: Record, why: str) -> None:
        ExpressionStats.failures += 1
        now = time.monotonic()
        if now - self._last_logged >= LOG_EVERY_S:
            self._last_logged = now
            log.info(
                "filter expression %r failed on partition %d offset %d, no match: %s",
                self.source[:200], record.partition, record.offset, why[:300],
            )  # fmt: skip


_SHARED: weakref.WeakValueDictionary[tuple[object, ...], ExpressionFilter] = weakref.WeakValueDictionary()


def expression_filter(
    source: str, params: Mapping[str, str], guarded: Mapping[str, Mapping[str, str]] | None
) -> ExpressionFilter:
    """The process's one filter for this expression and these variables (made on first use)."""
    variables = guard_variables(guarded)
    key = (source, tuple(sorted(params.items())), json.dumps(variables, sort_keys=True))
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = ExpressionFilter(source, params, variables)
    return found
