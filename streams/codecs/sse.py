"""The SSE wire format (docs/contract.md §3): events, comments and the retry line, as bytes."""

from __future__ import annotations

import base64
import re

_LINE_BREAK = re.compile(rb"\r\n|\r|\n")

KEEPALIVE = b":\n\n"


def retry(ms: int) -> bytes:
    return b"retry:%d\n\n" % ms


def data_lines(value: bytes) -> bytes:
    """`data:` lines for a value; CRLF, CR and LF all end a line. Bytes pass through unchanged."""
    return b"".join(b"data:" + line + b"\n" for line in _LINE_BREAK.split(value))


def event(data: bytes, *, event_id: bytes | None = None, event_type: bytes | None = None) -> bytes:
    head = b""
    if event_id is not None:
        head += b"id:" + event_id + b"\n"
    if event_type is not None:
        head += b"event:" + event_type + b"\n"
    return head + data_lines(data) + b"\n"


def body(value: bytes | None, key: bytes | None) -> bytes:
    """Everything of a record's event after its id line: shared by every subscriber, encoded once.

    A tombstone (null value) is `event:delete` with the base64url key (an empty data line for a null key).
    """
    if value is None:
        deleted = b"" if key is None else base64.urlsafe_b64encode(key)
        return b"event:delete\n" + data_lines(deleted) + b"\n"
    return data_lines(value) + b"\n"


def message(value: bytes | None, key: bytes | None, event_id: bytes) -> bytes:
    """The event for a Kafka record."""
    return b"id:" + event_id + b"\n" + body(value, key)
