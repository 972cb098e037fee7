"""The SSE wire format (docs/contract.md §3)."""

from __future__ import annotations

from streams.codecs import sse


def test_it_writes_a_message_with_its_id() -> None:
    assert sse.message(b"Hello, world", b"k", b"AQQABAIC") == b"id:AQQABAIC\ndata:Hello, world\n\n"


def test_it_splits_values_on_every_kind_of_line_break() -> None:
    assert sse.data_lines(b"a\r\nb\rc\nd\n") == b"data:a\ndata:b\ndata:c\ndata:d\ndata:\n"


def test_it_sends_an_empty_value_as_one_empty_data_line() -> None:
    assert sse.message(b"", None, b"X") == b"id:X\ndata:\n\n"


def test_it_passes_bytes_that_are_not_utf8_through() -> None:
    assert sse.message(b"\xff\xfe", None, b"X") == b"id:X\ndata:\xff\xfe\n\n"


def test_it_sends_a_tombstone_as_a_delete_event_with_the_key() -> None:
    assert sse.message(None, b"key", b"AQQABAIC") == b"id:AQQABAIC\nevent:delete\ndata:a2V5\n\n"


def test_it_sends_a_null_key_tombstone_with_an_empty_data_line() -> None:
    assert sse.message(None, None, b"X") == b"id:X\nevent:delete\ndata:\n\n"


def test_it_starts_with_the_retry_line() -> None:
    assert sse.retry(2000) == b"retry:2000\n\n"
