"""Projection of a record's JSON value to a stream's `fields` (JSON Pointers; docs/contract.md §7).

What a projection keeps has the value's shape: `/item/price` of `{"item": {"price": 3, "name": "x"}, "id": 1}` is
`{"item": {"price": 3}}`. A pointer through an array keeps the elements it names at their places, those before
them null (`/items/1` of `[5, 6, 7]` is `[null, 6]`). A part the value lacks is left out; a value that is not a
JSON object or array, or not JSON, is sent as it is, and so is a tombstone; one with none of the fields is sent as
`{}` (or `[]`).

The streams that ask for the same fields share one `Projection` (kept while a stream holds it), which keeps the
projected event body of the records it saw last: a record is projected and encoded once per set of fields in a
process, however many streams send it, as `Record.body` is once for all streams without a projection.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from typing import Any

from bindings.pointers import parse_pointer
from streams.codecs import sse
from streams.kafka.client import Record

MEMO_RECORDS = 4096
_MISSING = object()
_OPENING = (b"{", b"[")
_INDEX = re.compile(r"0|[1-9][0-9]*")  # an array index in a pointer (RFC 6901 §4)
Tree = dict[str, "Tree | None"]  # token -> what to keep under it; None: all of it


def tree_of(pointers: Sequence[str]) -> Tree:
    """The pointers merged into one tree; a pointer that is a prefix of another keeps all of its part."""
    tree: Tree = {}
    for pointer in pointers:
        node: Tree | None = tree
        tokens = parse_pointer(pointer)
        for depth, token in enumerate(tokens):
            assert node is not None  # noqa: S101 - a prefix already kept whole stops the walk below
            if depth == len(tokens) - 1:
                node[token] = None
            else:
                child = node.setdefault(token, {})
                if child is None:
                    break
                node = child
    return tree


def project(value: Any, tree: Tree | None) -> Any:
    """The parts of `value` that `tree` keeps, in the value's shape; _MISSING when it holds none of them (an
    object or array in which none of the parts named is found is left out too)."""
    if tree is None:
        return value
    if isinstance(value, dict):
        out = {}
        for token, sub in tree.items():
            if token in value and (kept := project(value[token], sub)) is not _MISSING:
                out[token] = kept
        return out or _MISSING
    if isinstance(value, list):
        found: dict[int, Any] = {}
        for name, sub in tree.items():
            if _INDEX.fullmatch(name) and int(name) < len(value):
                kept = project(value[int(name)], sub)
                if kept is not _MISSING:
                    found[int(name)] = kept
        return [found.get(index) for index in range(max(found) + 1)] if found else _MISSING
    return _MISSING


def projected(value: bytes | None, tree: Tree) -> bytes | None:
    """`value` projected and encoded again as compact JSON; unchanged when it is not a JSON object or array."""
    if value is None or (value[:1] not in _OPENING and value[:64].lstrip()[:1] not in _OPENING):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if not isinstance(parsed, dict | list):
        return value
    kept = project(parsed, tree)
    if kept is _MISSING:  # none of the fields: an empty object or array
        kept = type(parsed)()
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()


class Projection:
    """One set of fields, shared by the streams that ask for it, and hashed by identity."""

    __slots__ = ("__weakref__", "_memo", "fields", "tree")

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self.tree = tree_of(fields)
        self._memo: dict[int, tuple[Record, bytes | None, bytes]] = {}  # id -> (record, value, body)

    def value(self, record: Record) -> bytes | None:
        """The record's value projected (as the stream sends it)."""
        return self._entry(record)[1]

    def body(self, record: Record) -> bytes:
        """The record's event after its id line, with its value projected."""
        return self._entry(record)[2]

    def _entry(self, record: Record) -> tuple[Record, bytes | None, bytes]:
        found = self._memo.get(id(record))
        if found is not None and found[0] is record:
            return found
        value = projected(record.value, self.tree)
        entry = (record, value, record.body if value is record.value else sse.body(value, record.key))
        if len(self._memo) >= MEMO_RECORDS:
            self._memo.clear()
        self._memo[id(record)] = entry
        return entry


_SHARED: weakref.WeakValueDictionary[tuple[str, ...], Projection] = weakref.WeakValueDictionary()


def projection(fields: Sequence[str]) -> Projection | None:
    """The process's one projection to `fields` (None: no projection)."""
    if not fields:
        return None
    key = tuple(fields)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = Projection(key)
    return found
