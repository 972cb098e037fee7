"""The CEL environment of a route filter's `expression` (docs/contract.md §7): the one declaration of the variables an
expression may read and their types, shared by the checks on save and the data plane that evaluates it.

An expression is compiled and type-checked against these declarations: a syntax error, an undeclared name, an
operator applied to types it does not take (`params.region + 1`) or a result that cannot be a boolean is refused
when the route is saved, keyed by the field. What the declarations leave open (`value` and `key` are any JSON
value) is found out per record, on the data plane, where such a failure means "no match".
"""

from __future__ import annotations

import re
from functools import cache

import cel_expr_python.cel as cel  # noqa: PLR0402 - mypy reads the stubs of a folder without __init__ only so

VALUE = "value"  # the record's value decoded as JSON: maps, lists, numbers, strings, booleans, null
KEY = "key"  # the record's key, decoded likewise (a key that is not JSON: its text)
HEADERS = "headers"  # header name -> its value as text (the first, when a name repeats)
PARAMS = "params"  # the path's parameters, name -> text
GUARDED = "guarded"  # guard name -> {"identity": text, "attributes": {name: text}}
VARIABLES = (VALUE, KEY, HEADERS, PARAMS, GUARDED)
MAX_LENGTH = 4000

_POSITION = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
# `guarded.jwt.identity`, `guarded['jwt'].attributes.region`, `guarded["jwt"]["attributes"]["region"]`, ...
_GUARD_READ = re.compile(
    r"""guarded\s*(?:\.\s*(\w+)|\[\s*['"](\w+)['"]\s*\])\s*"""
    r"""(?:\.\s*identity\b|\[\s*['"]identity['"]\s*\]"""
    r"""|(?:\.\s*attributes|\[\s*['"]attributes['"]\s*\])\s*(?:\.\s*(\w+)|\[\s*['"](\w+)['"]\s*\]))"""
)


class ExpressionError(ValueError):
    """The expression cannot be a filter: the message says where and why."""


@cache
def environment() -> cel.Env:
    """The process's one CEL environment (built on first use: compiling needs it, importing this module not)."""
    text = cel.Type.STRING
    return cel.NewEnv(
        variables={
            VALUE: cel.Type.DYN,
            KEY: cel.Type.DYN,
            HEADERS: cel.Type.Map(text, text),
            PARAMS: cel.Type.Map(text, text),
            GUARDED: cel.Type.Map(text, cel.Type.Map(text, cel.Type.DYN)),
        }
    )


def compile_expression(source: str) -> cel.Expression:
    """The expression compiled and type-checked; ExpressionError if it cannot be a filter."""
    if not source.strip():
        raise ExpressionError("An expression cannot be empty.")
    if len(source) > MAX_LENGTH:
        raise ExpressionError(f"An expression is at most {MAX_LENGTH} characters.")
    try:
        expression = environment().compile(source)
    except RuntimeError as exc:  # how the library reports a parse or check error
        raise ExpressionError(describe(str(exc))) from None
    returns = expression.return_type()
    if returns not in (cel.Type.BOOL, cel.Type.DYN):
        raise ExpressionError(
            f"The expression gives {returns.name().lower()}; a filter's expression must give a boolean "
            "(true: the record matches)."
        )
    return expression


def describe(message: str) -> str:
    """The library's error text as a field message: each error's line, column and reason."""
    found = [f"line {line}, column {column}: {reason}" for line, column, reason in _POSITION.findall(message)]
    return "; ".join(found) if found else message.strip()


def guard_reads(source: str) -> set[tuple[str, str]] | None:
    """(guard, `identity` or `attributes.<name>`) for each guard value the expression names; None when it reads
    `guarded` in a form not named here (an index computed at run time), so it may read any of them."""
    reads: set[tuple[str, str]] = set()
    for found in _GUARD_READ.finditer(source):
        guard = found.group(1) or found.group(2)
        attribute = found.group(3) or found.group(4)
        reads.add((guard, "identity" if attribute is None else f"attributes.{attribute}"))
    if source.count(GUARDED) > len(_GUARD_READ.findall(source)):
        return None
    return reads
