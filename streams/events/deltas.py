"""Deltas of one stream (docs/contract.md §7, `?delta=merge-patch`): per key, the first value whole, then an
RFC 7396 JSON Merge Patch from the value last sent for that key, as `event:patch`, whenever the patch is shorter.

A patch is computed once per pair of records in the process (`patch_body`): streams that last sent a key's same
record and now send the same next one share it, however many they are. A stream remembers the record it last sent
for at most `MAX_KEYS` keys (least recently sent forgotten first); a key it forgot, a value that is not a JSON
object, a tombstone or a record without a key goes whole. A merge patch cannot set a member to null (null removes
it), so a change to null goes whole too.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from streams.codecs import sse
from streams.kafka.client import Record
from streams.routes.projection import Projection

MAX_KEYS = 1024  # keys a stream remembers its last value of
MEMO_PAIRS = 4096
PATCH = b"patch"
_UNPATCHABLE = object()

_parsed: dict[int, tuple[bytes, Any]] = {}  # id(value bytes) -> (the bytes, their JSON object)
_patches: dict[tuple[int, int, int], tuple[Record, Record, bytes | None]] = {}  # (ids) -> (before, after, body)


def merge_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | object:
    """The RFC 7396 patch that turns `before` into `after`; _UNPATCHABLE when one would need a null member."""
    patch: dict[str, Any] = {}
    for name in before:
        if name not in after:
            patch[name] = None
    for name, value in after.items():
        old = before.get(name, _UNPATCHABLE)
        if old == value and type(old) is type(value):
            continue
        if isinstance(value, dict) and isinstance(old, dict):
            inner = merge_patch(old, value)
            if inner is _UNPATCHABLE:
                return _UNPATCHABLE
            patch[name] = inner
        elif value is None or (isinstance(value, dict) and _holds_null_member(value)):
            return _UNPATCHABLE  # applied, a null would remove the member instead of setting it
        else:
            patch[name] = value
    return patch


def _holds_null_member(value: dict[str, Any]) -> bool:
    return any(v is None or (isinstance(v, dict) and _holds_null_member(v)) for v in value.values())


def _object(value: bytes) -> dict[str, Any] | None:
    """The JSON object `value` holds, parsed once per value in the process; None if it holds none."""
    found = _parsed.get(id(value))
    if found is not None and found[0] is value:
        return found[1] if isinstance(found[1], dict) else None
    try:
        parsed = json.loads(value) if value[:1] == b"{" else None
    except ValueError:
        parsed = None
    if len(_parsed) >= MEMO_PAIRS:
        _parsed.clear()
    _parsed[id(value)] = (value, parsed)
    return parsed if isinstance(parsed, dict) else None


def patch_body(before: Record, after: Record, projection: Projection | None) -> bytes | None:
    """The `event:patch` body turning what `before` sent into what `after` sends, or None when there is none."""
    memo_key = (id(before), id(after), id(projection))
    found = _patches.get(memo_key)
    if found is not None and found[0] is before and found[1] is after:
        return found[2]
    old_value = before.value if projection is None else projection.value(before)
    new_value = after.value if projection is None else projection.value(after)
    body = None
    old, new = (_object(old_value) if old_value else None), (_object(new_value) if new_value else None)
    if old is not None and new is not None:
        patch = merge_patch(old, new)
        if patch is not _UNPATCHABLE:
            text = json.dumps(patch, separators=(",", ":"), ensure_ascii=False).encode()
            body = b"event:" + PATCH + b"\n" + sse.data_lines(text) + b"\n"
    if len(_patches) >= MEMO_PAIRS:
        _patches.clear()
    _patches[memo_key] = (before, after, body)
    return body


class Deltas:
    """The record a stream last sent per key, and what it sends next: the whole value or the shorter patch."""

    def __init__(self, projection: Projection | None) -> None:
        self.projection = projection
        self.last: OrderedDict[bytes, Record] = OrderedDict()

    def body(self, record: Record, whole: bytes) -> bytes:
        """What goes after the id line of `record`'s event, whose whole body is `whole`."""
        key = record.key
        if key is None:
            return whole
        before = self.last.pop(key, None)
        if record.value is None:  # a tombstone: the next value of its key goes whole
            return whole
        self.last[key] = record
        if len(self.last) > MAX_KEYS:
            self.last.popitem(last=False)
        if before is None:
            return whole
        patch = patch_body(before, record, self.projection)
        return patch if patch is not None and len(patch) < len(whole) else whole
