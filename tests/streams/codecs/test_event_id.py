"""The `${etag}` event-id codec (docs/contract.md §4): Zilla's test vectors, round trips, malformed input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.codecs.event_id import decode_progress, encode_progress, etag_id, key_id, parse_id

VECTORS = [
    ({0: 2, 1: 1}, "AQQABAIC"),
    ({0: 3, 1: 1}, "AQQABgIC"),
    ({0: 2, 1: -2, 2: -2}, "AQYABAIDBAM="),
    ({0: 1234567}, "AQIAjtqWAQ=="),
]


@pytest.mark.parametrize(("progress", "text"), VECTORS)
def test_it_encodes_the_zilla_vectors(progress: dict[int, int], text: str) -> None:
    assert encode_progress(progress) == text


@pytest.mark.parametrize(("progress", "text"), VECTORS)
def test_it_decodes_the_zilla_vectors(progress: dict[int, int], text: str) -> None:
    assert decode_progress(text) == progress


def test_it_appends_the_etag_header() -> None:
    assert etag_id({0: 2, 1: 1}, b"revision=42") == b"AQQABAIC/revision=42"
    assert parse_id("AQQABAIC/revision=42") == {0: 2, 1: 1}


def test_it_leaves_out_an_etag_that_would_break_the_id_line() -> None:
    assert etag_id({0: 2, 1: 1}, b"a\nid:evil") == b"AQQABAIC"


def test_it_writes_the_key_form_as_json() -> None:
    assert key_id(b"key", {0: 2, 1: 1}, b"revision=42") == b'["a2V5","AQQABAIC/revision=42"]'
    assert key_id(None, {0: 2, 1: 1}) == b'[null,"AQQABAIC"]'
    assert json.loads(key_id(b"k", {0: 1}, b'quote"d')) == ["aw==", 'AQIAAg==/quote"d']


def test_it_resumes_from_a_key_form_id_without_etag() -> None:
    # Zilla drops the last character here and replays everything; we resume exactly.
    assert parse_id('["a2V5","AQQABAIC"]') == {0: 2, 1: 1}
    assert parse_id('[null,"AQQABAIC"]') == {0: 2, 1: 1}


@pytest.mark.parametrize(
    "text",
    [
        *("", "100", "AQQABAI", "AgQABAIC", "AQQABA==", "AQQABAICAA==", "[", '["a"]', "[1,2]", "!!!!", "AQ==", "===="),
        "[" * 4000,  # nested past the JSON parser's recursion limit: was a RecursionError (a 500)
    ],
)
def test_it_treats_malformed_ids_as_a_fresh_start(text: str) -> None:
    assert parse_id(text) is None


progress_maps = st.dictionaries(
    st.integers(min_value=0, max_value=2**31 - 1),
    st.one_of(st.just(-2), st.integers(min_value=0, max_value=2**63 - 1)),
    max_size=64,
)


@given(progress_maps)
def test_it_round_trips_any_progress_map(progress: dict[int, int]) -> None:
    assert decode_progress(encode_progress(progress)) == progress


@given(progress_maps, st.one_of(st.none(), st.binary(max_size=64)), st.one_of(st.none(), st.binary(max_size=32)))
def test_it_round_trips_the_key_form(progress: dict[int, int], key: bytes | None, etag: bytes | None) -> None:
    assert parse_id(key_id(key, progress, etag).decode()) == progress


@given(st.text())
def test_it_never_raises_on_arbitrary_text(text: str) -> None:
    parse_id(text)
