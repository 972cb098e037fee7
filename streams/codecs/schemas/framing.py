"""The schema registry's wire framing, as Confluent's serializers write it before the payload.

byte 0      magic byte, 0
bytes 1-4   the schema id, a big-endian signed 32-bit integer
(Protobuf only) the message indexes: a zig-zag varint count, then that many zig-zag varints, the path of the
            message in its file (index among the file's messages, then among that message's nested ones).
            A count of 0 stands for [0], the file's first message.
"""

from __future__ import annotations

from streams.codecs.schemas.errors import DecodeError, Reason

MAGIC = 0
HEADER = 5
_MAX_VARINT_BYTES = 10
_MAX_INDEXES = 256


def unframe(raw: bytes) -> tuple[int, memoryview]:
    """The schema id of a framed record, and what follows it."""
    if not raw:
        raise DecodeError(Reason.TRUNCATED, "an empty record")
    if raw[0] != MAGIC:
        raise DecodeError(Reason.MAGIC_BYTE, f"starts with byte {raw[0]}")
    if len(raw) < HEADER:
        raise DecodeError(Reason.TRUNCATED, "the schema id ends early")
    return int.from_bytes(raw[1:HEADER], "big", signed=True), memoryview(raw)[HEADER:]


def message_indexes(payload: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """A Protobuf record's message indexes, and the message after them."""
    count, position = _varint(payload, 0)
    if count == 0:
        return (0,), payload[position:]
    if count < 0 or count > _MAX_INDEXES:
        raise DecodeError(Reason.INVALID, f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, position = _varint(payload, position)
        if index < 0:
            raise DecodeError(Reason.INVALID, f"message index {index}")
        indexes.append(index)
    return tuple(indexes), payload[position:]


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    for offset in range(_MAX_VARINT_BYTES):
        if position + offset >= len(data):
            raise DecodeError(Reason.TRUNCATED, "the message indexes end early")
        byte = data[position + offset]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:  # noqa: PLR2004
            return (value >> 1) ^ -(value & 1), position + offset + 1
        shift += 7
    raise DecodeError(Reason.INVALID, "a message index varint over 10 bytes")


def frame(schema_id: int, payload: bytes, indexes: tuple[int, ...] | None = None) -> bytes:
    """A framed record (tests and tools write them): `indexes` for Protobuf."""
    head = bytes([MAGIC]) + schema_id.to_bytes(4, "big", signed=True)
    if indexes is None:
        return head + payload
    path = () if indexes == (0,) else indexes
    return head + b"".join(_zigzag(number) for number in (len(path), *path)) + payload


def _zigzag(value: int) -> bytes:
    number = (value << 1) ^ (value >> 63)
    out = bytearray()
    while number >= 0x80:  # noqa: PLR2004
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)
