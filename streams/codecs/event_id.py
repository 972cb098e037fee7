"""Zilla-compatible SSE event ids: the `${etag}` progress codec and the key form (docs/contract.md §4).

`${etag}` is base64url (padded) of: byte 0x01, zig-zag LEB128 partition count, then per partition the
zig-zag varint partition id and zig-zag varint64 next offset to read (-2 = earliest). A message's `etag`
header is appended after `/`. The key form is the JSON array `["<base64url key>", "<etag id>"]`.

Parsing never raises: a malformed id yields ``None`` and the stream starts fresh.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping

KIND_V1 = 0x01
OFFSET_EARLIEST = -2
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_MAX_VARINT_BYTES = 10
_CONTINUATION = 0x80
_MAX_PARTITION = 0x7FFFFFFF


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _varint(value: int, out: bytearray) -> None:
    number = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while number >= _CONTINUATION:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)


def encode_pair(partition: int, offset: int) -> bytes:
    """One partition's entry of the progress encoding, to keep and join instead of re-encoding every entry."""
    out = bytearray()
    _varint(partition, out)
    _varint(offset, out)
    return bytes(out)


def encode_parts(parts: Mapping[int, bytes]) -> bytes:
    """The `${etag}` text (as bytes) from each partition's `encode_pair`."""
    head = bytearray([KIND_V1])
    _varint(len(parts), head)
    return base64.urlsafe_b64encode(bytes(head) + b"".join(parts[p] for p in sorted(parts)))


def encode_progress(progress: Mapping[int, int]) -> str:
    """The `${etag}` text for a partition -> next-offset map, partitions in ascending order."""
    out = bytearray([KIND_V1])
    _varint(len(progress), out)
    for partition in sorted(progress):
        _varint(partition, out)
        _varint(progress[partition], out)
    return base64.urlsafe_b64encode(bytes(out)).decode("ascii")


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    number = 0
    for shift_index in range(_MAX_VARINT_BYTES):
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        number |= (byte & 0x7F) << (7 * shift_index)
        if not byte & 0x80:
            if number >= 1 << 64:
                raise ValueError("varint overflow")
            # Values are 64-bit two's complement after zig-zag decoding.
            value = _unzigzag(number)
            return value, pos
    raise ValueError("varint too long")


def decode_progress(text: str) -> dict[int, int] | None:
    """The partition -> offset map of a `${etag}` text (without `/etag`), or None if malformed."""
    if not text or len(text) % 4 or not _BASE64URL.fullmatch(text):
        return None
    try:
        data = base64.urlsafe_b64decode(text)
    except (binascii.Error, ValueError):
        return None
    if not data or data[0] != KIND_V1:
        return None
    try:
        count, pos = _read_varint(data, 1)
        if count < 0 or count > len(data):
            return None
        progress: dict[int, int] = {}
        for _ in range(count):
            partition, pos = _read_varint(data, pos)
            offset, pos = _read_varint(data, pos)
            if partition < 0 or partition > _MAX_PARTITION or partition in progress:
                return None
            progress[partition] = offset
    except ValueError:
        return None
    if pos != len(data):
        return None
    return progress


def _safe_etag(etag: bytes | None) -> bytes | None:
    # An id line cannot hold CR, LF or NUL (browsers would split it or drop the id): leave such etags out.
    if etag is None or any(c in etag for c in b"\r\n\x00"):
        return None
    return etag


def etag_id_from(text: bytes, etag: bytes | None = None) -> bytes:
    """The `${etag}` event id from an encoded progress: then `/` and the message's `etag` header if it has one."""
    safe = _safe_etag(etag)
    return text if safe is None else text + b"/" + safe


def key_id_from(key: bytes | None, text: bytes, etag: bytes | None = None) -> bytes:
    """The key-form event id, `["<base64url key>","<etag id>"]`, as valid JSON (`null` for no key)."""
    encoded_key = None if key is None else base64.urlsafe_b64encode(key).decode("ascii")
    progress_part = etag_id_from(text, etag).decode("utf-8", errors="replace")
    return json.dumps([encoded_key, progress_part], separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def etag_id(progress: Mapping[int, int], etag: bytes | None = None) -> bytes:
    return etag_id_from(encode_progress(progress).encode("ascii"), etag)


def key_id(key: bytes | None, progress: Mapping[int, int], etag: bytes | None = None) -> bytes:
    return key_id_from(key, encode_progress(progress).encode("ascii"), etag)


def parse_id(last_event_id: str | None) -> dict[int, int] | None:
    """Where to resume from a Last-Event-ID of either form; None for a missing or malformed id."""
    if not last_event_id:
        return None
    text = last_event_id.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # `[[[…`: nested past the parser's limit, within 4096 bytes
            return None
        if not isinstance(parsed, list) or len(parsed) != 2 or not isinstance(parsed[1], str):  # noqa: PLR2004
            return None
        text = parsed[1]
    return decode_progress(text.split("/", 1)[0])
