"""An inline catalog's subjects: exact names before wildcards, the most specific wildcard, versions."""

from __future__ import annotations

import pytest

from streams.codecs.schemas import DecodeError, InlineSchema, Reason
from streams.codecs.schemas.sources import InlineSource


def test_it_picks_the_exact_subject_then_the_most_specific_wildcard_and_the_latest_version() -> None:
    source = InlineSource(
        [
            InlineSchema("*", 1, "json", "any"),
            InlineSchema("orders-*", 1, "json", "orders v1"),
            InlineSchema("orders-*", 3, "json", "orders v3"),
            InlineSchema("orders-eu-value", 1, "json", "eu"),
        ]
    )

    assert source.by_subject("orders-eu-value", "latest").text == "eu"
    assert source.by_subject("orders-us-value", "latest").text == "orders v3"
    assert source.by_subject("orders-us-value", 1).text == "orders v1"
    assert source.by_subject("refunds-value", "latest").text == "any"
    with pytest.raises(DecodeError) as error:
        source.by_subject("orders-us-value", 2)
    assert error.value.reason is Reason.UNKNOWN_SCHEMA
