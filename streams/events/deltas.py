"""Deltas of one stream (docs/contract.md §7, `?delta=merge-patch`): per key, the first value whole, then an
RFC 7396 JSON Merge Patch from the value last sent for that key, as `event:patch`, whenever the patch is shorter.

A patch is computed once per pair of records in the process (`patch_body`): streams that last sent a key's same
record and now send the same next one share it, however many they are. What a stream last sent is part of where
it stands (`DeltaState`, one shared object per value): streams in the same place that sent the same share the
fan-out's writes as other streams do. A stream remembers the record it last sent
for at most `MAX_KEYS` keys (least recently sent forgotten first); a key it forgot, a value that is not a JSON
object, a tombstone or a record without a key goes whole. A merge patch cannot set a member to null (null removes
it), so a change to null goes whole too.
"""

from __future__ import annotations

import json
import weakref
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


class DeltaState(OrderedDict[bytes, Record]):
    """The record a stream last sent per key, least recently sent first. Once settled it is shared, never changed
    in place: every stream in the same state holds the same one (`settle`), so streams in the same place with the
    same state share the fan-out's writes (its identity is part of their share key)."""


_STATES: weakref.WeakValueDictionary[tuple[tuple[bytes, int], ...], DeltaState] = weakref.WeakValueDictionary()
_EMPTY = DeltaState()


class Deltas:
    """What a stream sends of each record's value: the whole value, or the shorter patch from what it last sent
    of the record's key (`state`, replaced when it changes: copied on its first change in a feed)."""

    def __init__(self, projection: Projection | None) -> None:
        self.projection = projection
        self.state = _EMPTY
        self._own = False  # `state` is this stream's own copy, changed in place during a feed

    def begin(self) -> None:
        """A feed starts: the state may be shared, so the first change copies it."""
        self._own = False

    def settle(self) -> None:
        """A feed ended: a state changed in it becomes the process's one object of that value."""
        if self._own:
            fingerprint = tuple((key, id(record)) for key, record in self.state.items())
            self.state = _STATES.setdefault(fingerprint, self.state)
            self._own = False

    def take(self, state: DeltaState) -> None:
        """Stand where another stream stood: its state, as it is (shared)."""
        self.state, self._own = state, False

    def body(self, record: Record, whole: bytes) -> bytes:
        """What goes after the id line of `record`'s event, whose whole body is `whole`."""
        key = record.key
        if key is None:
            return whole
        if not self._own:
            self.state, self._own = DeltaState(self.state), True
        last = self.state
        before = last.pop(key, None)
        if record.value is None:  # a tombstone: the next value of its key goes whole
            return whole
        last[key] = record
        if len(last) > MAX_KEYS:
            last.popitem(last=False)
        if before is None:
            return whole
        patch = patch_body(before, record, self.projection)
        return patch if patch is not None and len(patch) < len(whole) else whole
