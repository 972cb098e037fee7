"""Start-position decisions (docs/contract.md §4, §5, §7), with the broker's answers given as data.

Every case of the decision, including answers a broker gives rarely (a partition whose start passed its end, no
record at or after a time). The same decisions end to end, on the real broker with records deleted, past
retention and looked up by timestamp: tests/e2e/test_kafka_contract.py.
"""

from __future__ import annotations

import pytest

from streams.codecs.event_id import OFFSET_EARLIEST
from streams.events.start_plan import Reset, parse_since, plan_start, since_offsets
from streams.kafka.client import Watermarks

MARKS = {0: Watermarks(low=100, high=200), 1: Watermarks(low=0, high=50)}


def test_a_fresh_historical_stream_starts_every_partition_at_the_earliest() -> None:
    plan = plan_start(MARKS, resumed=None, start="historical")
    assert plan.offsets == plan.progress == {0: OFFSET_EARLIEST, 1: OFFSET_EARLIEST}
    assert plan.resets == []


def test_a_live_stream_starts_at_the_end_and_its_ids_say_so() -> None:
    plan = plan_start(MARKS, resumed=None, start="live")
    assert plan.offsets == plan.progress == {0: 200, 1: 50}


def test_a_resumed_partition_restarts_at_exactly_its_offset() -> None:
    plan = plan_start(MARKS, resumed={0: 150, 1: 7}, start="live")
    assert plan.offsets == plan.progress == {0: 150, 1: 7}
    assert plan.resets == []


@pytest.mark.parametrize("start", ["historical", "live"])
def test_a_partition_the_resume_id_does_not_list_starts_at_the_earliest_whatever_the_start_mode(start: str) -> None:
    # An id lists every partition of the topic: one it lacks was added since, and all its records are new.
    plan = plan_start(MARKS, resumed={1: 7}, start=start, since={0: 150, 1: 50})
    assert plan.offsets == plan.progress == {0: OFFSET_EARLIEST, 1: 7}
    assert plan.resets == []


def test_a_resumed_offset_below_the_log_start_gives_a_reset_from_the_earliest() -> None:
    plan = plan_start(MARKS, resumed={0: 42, 1: 3}, start="historical")
    assert plan.resets == [Reset(partition=0, requested=42, earliest=100)]
    assert plan.offsets == plan.progress == {0: 100, 1: 3}


def test_a_resumed_offset_past_the_end_gives_a_reset_too() -> None:
    # The topic was deleted and re-created: the client's position means nothing any more.
    plan = plan_start(MARKS, resumed={1: 999}, start="historical")
    assert plan.resets == [Reset(partition=1, requested=999, earliest=0)]
    assert plan.offsets[1] == 0


def test_the_end_offset_itself_is_a_valid_resume_point() -> None:
    assert plan_start(MARKS, resumed={0: 200}, start="historical").resets == []


def test_a_resumed_minus_two_means_the_earliest_without_reset() -> None:
    plan = plan_start(MARKS, resumed={0: OFFSET_EARLIEST}, start="live")
    assert plan.offsets[0] == OFFSET_EARLIEST
    assert plan.resets == []


def test_since_starts_unresumed_partitions_at_the_looked_up_offsets() -> None:
    since = since_offsets({0: 150, 1: -1}, MARKS)
    assert since == {0: 150, 1: 50}  # -1: nothing at or after the time yet, so from the end
    plan = plan_start(MARKS, resumed=None, start="historical", since=since)
    assert plan.offsets == {0: 150, 1: 50}


def test_since_offsets_stay_within_what_the_partition_holds() -> None:
    assert since_offsets({0: 3, 1: 80}, MARKS) == {0: 100, 1: 50}


@pytest.mark.parametrize(
    ("text", "epoch_ms"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("2023-11-14T22:13:20.5Z", 1_700_000_000_500),
        ("9223372036854775807", 2**63 - 1),
        ("0001-01-01", 0),  # before 1970: every record qualifies (Kafka refuses a negative time)
        ("1969-12-31T23:59:59.999Z", 0),  # not -1, which Kafka reads as "the end"
    ],
)
def test_since_accepts_epoch_ms_and_iso_8601(text: str, epoch_ms: int) -> None:
    assert parse_since(text) == epoch_ms


@pytest.mark.parametrize(
    "text", ["yesterday", "", "-5", "2023-13-01", "\u00b2", "\u0661", "9223372036854775808", "9" * 5000]
)
def test_since_rejects_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="since="):
        parse_since(text)
