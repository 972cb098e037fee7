"""Bounds on the work one record may cost: its bytes, its decoded JSON's bytes, its items, how deep it nests.

A record past a bound is skipped as `too-large` before the work it would cost is done, where that can be told
cheaply, and otherwise right after: a key or value of more than `max_bytes` is not decoded at all; a JSON record's
text is measured once it parses (the parser's own recursion limit stops anything deeper than about a thousand
levels, safely); an Avro record of a recursive schema is walked, within the bounds, before fastavro reads it
(avro_shape.py: fastavro's reader recurses in C, and a record nested 20 000 deep would crash the process); every
decoded value is measured as the JSON it became.

Measuring JSON text costs a few `bytes.count` calls for a record within the bounds; only a record whose counts
exceed them is looked at closely: its strings blanked out by one regular expression (linear on valid JSON),
then its brackets alone, reduced pair by pair as many times as it nests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streams.codecs.schemas.errors import DecodeError, Reason

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_ITEMS = 100_000
DEFAULT_MAX_DEPTH = 100  # Protobuf's parser stops at 100 levels by itself: the three formats agree

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)  # on valid JSON: each string once, no backtracking
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


@dataclass(frozen=True)
class Limits:
    """The bounds of one key or one value (settings `DECODE_MAX_BYTES`, `DECODE_MAX_ITEMS`, `DECODE_MAX_DEPTH`).

    `max_items` counts array items and map entries or object members, at any depth; `max_depth` counts the arrays,
    maps, records and objects one inside another (a flat object is 1 deep)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_items: int = DEFAULT_MAX_ITEMS
    max_depth: int = DEFAULT_MAX_DEPTH

    def check_size(self, raw: bytes | memoryview) -> None:
        if len(raw) > self.max_bytes:
            raise DecodeError(Reason.TOO_LARGE, f"{len(raw)} bytes, over {self.max_bytes}")

    def check_json(self, text: bytes) -> None:
        """`text`, valid JSON (a parser took it, or a serializer wrote it), within every bound."""
        self.check_size(text)
        opens = text.count(b"[") + text.count(b"{")
        commas = text.count(b",")
        if opens <= self.max_depth and opens + commas <= self.max_items:
            return  # a bound on both: items are at most the commas plus one per container
        blanked = _STRING.sub(b'""', text)
        if (items := _items(blanked)) > self.max_items:
            raise DecodeError(Reason.TOO_LARGE, f"{items} items, over {self.max_items}")
        brackets = blanked.translate(_BRACKETS, _NOT_BRACKETS)
        for _ in range(self.max_depth):
            if not brackets:
                return
            brackets = brackets.replace(b"()", b"")  # the innermost level of every branch at once
        if brackets:
            raise DecodeError(Reason.TOO_LARGE, f"nested deeper than {self.max_depth}")


def _items(blanked: bytes) -> int:
    """Array items and object members of JSON text whose strings are blank: a comma between two of them, and one
    more in every container that is not empty."""
    compact = blanked.translate(None, b" \t\r\n")
    containers = compact.count(b"[") + compact.count(b"{")
    return compact.count(b",") + containers - compact.count(b"[]") - compact.count(b"{}")
