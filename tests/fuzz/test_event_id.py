"""Event ids from anywhere (docs/contract.md §4): both forms round-trip, and no text or bytes make parsing raise.

A Last-Event-ID comes from the client in any bytes; the endpoint decodes it as UTF-8 with replacement and
`parse_id` answers the positions or None (a fresh start), never an exception.
"""

from __future__ import annotations

import base64
import json

from hypothesis import example, given
from hypothesis import strategies as st

from streams.codecs.event_id import (
    KIND_V1,
    decode_progress,
    encode_pair,
    encode_parts,
    encode_progress,
    etag_id,
    key_id,
    parse_id,
)
from tests.support.fuzz import PURE

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
PARTITION = st.integers(min_value=0, max_value=2**31 - 1)
progress_maps = st.dictionaries(PARTITION, st.one_of(st.just(-2), st.integers(0, 2**63 - 1), INT64), max_size=40)
ids = st.one_of(
    progress_maps.map(encode_progress),
    st.tuples(st.one_of(st.none(), st.binary(max_size=16)), progress_maps).map(
        lambda pair: key_id(pair[0], pair[1]).decode()
    ),
)


def assert_positions(found: dict[int, int] | None) -> None:
    if found is not None:
        assert all(0 <= partition < 2**31 for partition in found)
        assert all(-(2**63) <= offset < 2**63 for offset in found.values())


@PURE
@given(progress_maps)
@example({0: 2**63 - 1, 1: -(2**63), 2**31 - 1: -2})
def test_the_etag_form_round_trips_every_64_bit_offset(progress: dict[int, int]) -> None:
    text = encode_progress(progress)
    assert decode_progress(text) == progress
    assert parse_id(text) == progress
    # The per-partition encoding the subscriptions keep gives the same text.
    assert encode_parts({p: encode_pair(p, o) for p, o in progress.items()}).decode() == text


@PURE
@given(progress_maps, st.one_of(st.none(), st.binary(max_size=64)), st.one_of(st.none(), st.binary(max_size=64)))
@example({0: 1}, b"\xff\xfe", b'"/\\\r\n\x00')
def test_the_key_form_is_json_and_round_trips_any_key_and_etag(
    progress: dict[int, int], key: bytes | None, etag: bytes | None
) -> None:
    encoded = key_id(key, progress, etag)
    parsed = json.loads(encoded)
    assert parsed[0] == (None if key is None else base64.urlsafe_b64encode(key).decode())
    assert parse_id(encoded.decode()) == progress
    assert parse_id(etag_id(progress, etag).decode("utf-8", errors="replace")) == progress


@PURE
@given(st.one_of(st.text(), st.binary().map(lambda raw: raw.decode("utf-8", errors="replace"))))
@example("[" * 4000)
@example('["' + "A" * 4000 + '"]')
@example('[null,"AQ==/' + "\ud800" + '"]')
@example(" \t AQQABAIC \n")
def test_parsing_any_text_gives_positions_or_none(text: str) -> None:
    assert_positions(parse_id(text))


@PURE
@given(ids, st.data())
def test_a_damaged_id_gives_positions_or_none(text: str, data: st.DataObject) -> None:
    """One character of a real id replaced, removed or doubled: the parser's edges, not random noise."""
    index = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(st.one_of(st.sampled_from('A/_-=[]",\\'), st.characters(), st.just("")))
    damaged = text[:index] + replacement + text[index + 1 :]
    assert_positions(parse_id(damaged))
    assert_positions(parse_id(text[:index] + text[index] * 2 + text[index + 1 :]))


@PURE
@given(st.binary(max_size=120))
@example(bytes([KIND_V1, 0x02, 0x00]) + b"\xff" * 11)  # a varint longer than 64 bits
@example(bytes([KIND_V1, 0x7E]))  # 63 partitions announced, none given
@example(bytes([KIND_V1, 0x02, 0x01, 0x00]))  # a negative partition
def test_decoding_any_bytes_gives_positions_or_none(raw: bytes) -> None:
    """Whatever the bytes after the kind byte, as a base64url id."""
    text = base64.urlsafe_b64encode(bytes([KIND_V1]) + raw).decode()
    assert_positions(decode_progress(text))
