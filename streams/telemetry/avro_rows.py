"""The delivery log's rows in Avro's binary encoding, written here for the tables whose columns are all plain
(integers, strings, timestamps): the same bytes `fastavro.schemaless_writer` writes for them, at a fraction of its
cost.

Why: the sessions table gets two rows per stream (opened, closed), so a reconnect storm of 9 000 clients hands
the log's writer thread 18 000 rows at once. fastavro checked every branch of every column's union for every row,
about 19 µs a row, and as compiled code it held the interpreter's lock for a whole message of 2 000 rows: while
it wrote, the event loop waited for the lock after each of its socket calls and ran at a third of its speed
(docs/benchmarks.md, "The delivery log's rows"). A table with a map column (deliveries) is still written by
fastavro: it has a row per second, route and partition, not per stream.

Avro's binary encoding, as far as these tables need it: an int or a long is its zig-zag varint; a string its
UTF-8 length as a long, then its bytes; a union the index of its branch as a long, then the value (every column
here is `["null", T]`: `\\x00` for null, `\\x02` and the value otherwise); a record its fields in order; an array
blocks of a count and that many items, closed by a count of 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

NULL = b"\x00"  # the union's branch 0: null
ONE_BYTE = 0x80  # a varint below this is one byte
SHORT_STRING = ONE_BYTE >> 1  # a string shorter than this has a one-byte length (its zig-zag value below ONE_BYTE)
_SMALL = [bytes([n]) for n in range(ONE_BYTE)]


def varint(n: int) -> bytes:
    """The varint of a non-negative number (the zig-zag value of a long)."""
    if n < ONE_BYTE:
        return _SMALL[n]
    out = bytearray()
    while n >= ONE_BYTE:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n: int) -> int:
    """An Avro int's or long's zig-zag value (the same for both widths): small magnitudes, small values."""
    return n << 1 if n >= 0 else (-n << 1) - 1


def long(n: int) -> bytes:
    """An Avro int or long: its zig-zag varint."""
    return varint(zigzag(n))


_PRESENT_SMALL = [b"\x02" + bytes([n]) for n in range(ONE_BYTE)]  # branch 1 and a one-byte varint


def _present_long(n: int) -> bytes:
    """The union's branch 1 and a long."""
    value = zigzag(n)
    if value < ONE_BYTE:
        return _PRESENT_SMALL[value]
    return b"\x02" + varint(value)


def _present_string(s: str) -> bytes:
    """The union's branch 1 and a string."""
    raw = s.encode()
    if len(raw) < SHORT_STRING:
        return _PRESENT_SMALL[len(raw) << 1] + raw
    return b"\x02" + long(len(raw)) + raw


def _column(kind: pa.DataType) -> Callable[[Any], bytes] | None:
    """How a value of a nullable column of this Arrow type is written, when it is not null; None when this module
    does not write that type."""
    if pa.types.is_integer(kind) or pa.types.is_timestamp(kind):  # timestamps: milliseconds, as ints
        return _present_long
    if pa.types.is_string(kind):
        return _present_string
    return None


class RowEncoder:
    """Writes the rows of one table as one Avro array, the columns in `fixed` (the same for every row of the
    process) encoded once, here, and left out of the rows."""

    def __init__(self, schema: pa.Schema, fixed: Mapping[str, Any]) -> None:
        self.columns: list[tuple[str, Callable[[Any], bytes] | bytes]] = []
        for field in schema:
            encode = _column(field.type)
            if encode is None:
                raise TypeError(f"column {field.name}: {field.type} is not written here")
            if field.name not in fixed:
                self.columns.append((field.name, encode))
                continue
            value = fixed[field.name]
            written = NULL if value is None else encode(value)
            if self.columns and type(self.columns[-1][1]) is bytes:  # one constant for adjacent fixed columns
                written = cast(bytes, self.columns.pop()[1]) + written
            self.columns.append((field.name, written))

    @staticmethod
    def supports(schema: pa.Schema) -> bool:
        return all(_column(field.type) is not None for field in schema)

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> bytes:
        """The array of these rows (a row's own columns by name; a missing one is null)."""
        if not rows:
            return NULL
        parts = [long(len(rows))]
        append = parts.append
        columns = self.columns
        for row in rows:
            for name, column in columns:
                if type(column) is bytes:
                    append(column)
                    continue
                value = row.get(name)
                append(NULL if value is None else column(value))  # type: ignore[operator]
        append(NULL)
        return b"".join(parts)
