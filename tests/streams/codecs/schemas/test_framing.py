"""The registry framing: magic byte, schema id and Protobuf message indexes."""

from __future__ import annotations

import pytest

from streams.codecs.schemas import DecodeError, Reason
from streams.codecs.schemas.framing import frame, message_indexes, unframe


def test_it_reads_the_id_and_the_message_indexes_it_writes() -> None:
    schema_id, rest = unframe(frame(70000, b"payload", (1, 2)))
    indexes, payload = message_indexes(rest)

    assert (schema_id, indexes, bytes(payload)) == (70000, (1, 2), b"payload")
    assert message_indexes(unframe(frame(1, b"x", (0,)))[1])[0] == (0,)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"", Reason.TRUNCATED), (b"\x01\x00\x00\x00\x01", Reason.MAGIC_BYTE), (b"\x00\x00\x01", Reason.TRUNCATED)],
)
def test_it_refuses_a_frame_that_is_not_one(raw: bytes, expected: Reason) -> None:
    with pytest.raises(DecodeError) as error:
        unframe(raw)
    assert error.value.reason is expected


def test_it_finds_indexes_that_end_early_truncated() -> None:
    with pytest.raises(DecodeError) as error:
        message_indexes(memoryview(b"\x04\x02"))
    assert error.value.reason is Reason.TRUNCATED
