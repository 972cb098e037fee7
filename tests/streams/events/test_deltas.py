"""streams/events/deltas.py: RFC 7396 merge patches from the value a stream last sent for a key, when shorter;
whole values where a patch cannot say it; a patch computed once for every stream sending it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.codecs.event_id import OFFSET_EARLIEST
from streams.events.deltas import Deltas, merge_patch, patch_body
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.kafka.client import Record
from streams.routes.projection import projection


def rec(offset: int, value: Any, key: bytes | None = b"k") -> Record:
    data = None if value is None else (value if isinstance(value, bytes) else json.dumps(value).encode())
    return Record(0, offset, key, data, ())


BIG = {"id": 1, "price": 10, "name": "tea", "note": "n" * 200, "tags": ["a"], "item": {"sku": "t", "stock": 4}}


@pytest.mark.parametrize(
    ("after", "patch"),
    [
        ({**BIG, "price": 11}, {"price": 11}),
        ({k: v for k, v in BIG.items() if k != "note"}, {"note": None}),
        ({**BIG, "item": {"sku": "t", "stock": 3}}, {"item": {"stock": 3}}),
        ({**BIG, "tags": ["a", "b"]}, {"tags": ["a", "b"]}),
        ({**BIG, "price": 10.0}, {"price": 10.0}),  # a number's type is part of its value
        ({**BIG, "extra": {"deep": 1}}, {"extra": {"deep": 1}}),
    ],
)
def test_a_merge_patch_turns_the_value_before_into_the_value_after(after: dict[str, Any], patch: Any) -> None:
    assert merge_patch(BIG, after) == patch


@pytest.mark.parametrize("after", [{**BIG, "price": None}, {**BIG, "item": {"sku": None, "stock": 4}}])
def test_a_member_set_to_null_cannot_be_a_patch(after: dict[str, Any]) -> None:
    assert not isinstance(merge_patch(BIG, after), dict)


def test_a_key_goes_whole_first_then_as_a_patch_when_shorter() -> None:
    deltas = Deltas(None)
    first, second = rec(0, BIG), rec(1, {**BIG, "price": 11})
    assert deltas.body(first, first.body) is first.body
    assert deltas.body(second, second.body) == b'event:patch\ndata:{"price":11}\n\n'
    everything = rec(2, {"id": 2})  # a patch removing five members is longer than the value itself
    assert deltas.body(everything, everything.body) is everything.body


def test_tombstones_values_that_are_no_object_and_records_without_a_key_go_whole() -> None:
    deltas = Deltas(None)
    records = [rec(0, BIG), rec(1, None), rec(2, {**BIG, "price": 2}), rec(3, b"[1, 2]"), rec(4, [1, 3])]
    records.append(rec(5, BIG, key=None))
    assert [deltas.body(r, r.body) for r in records] == [r.body for r in records]


def test_streams_that_sent_the_same_record_share_the_patch_to_the_next() -> None:
    first, second = rec(0, BIG), rec(1, {**BIG, "price": 12})
    one, two = Deltas(None), Deltas(None)
    for deltas in (one, two):
        deltas.body(first, first.body)
    patch = one.body(second, second.body)
    assert patch is two.body(second, second.body)
    assert patch is patch_body(first, second, None)


def test_with_a_projection_the_patch_is_between_the_projected_values() -> None:
    fields = projection(["/price", "/note", "/item/stock"])
    deltas = Deltas(fields)
    first, second = rec(0, BIG), rec(1, {**BIG, "price": 12, "name": "changed", "item": {"sku": "u", "stock": 3}})
    assert fields is not None
    assert deltas.body(first, fields.body(first)) == fields.body(first)
    # `name` and `item.sku` changed too, but are not sent: the patch says nothing of them
    assert deltas.body(second, fields.body(second)) == b'event:patch\ndata:{"price":12,"item":{"stock":3}}\n\n'


def test_subscriptions_that_sent_the_same_hold_one_state_and_share_where_they_stand() -> None:
    def subscription() -> Subscription:
        options = SubscriptionOptions(key_form=True, deltas=True)
        return Subscription({0: OFFSET_EARLIEST}, ends={0: 0}, starts={0: 0}, options=options)

    first, second = subscription(), subscription()
    records = [rec(n, {**BIG, "price": n}) for n in range(3)]
    first.feed(records[:1])
    second.feed(records[:1])
    assert first.sent() is second.sent()  # one object per value: their share keys are equal
    first.feed(records[1:2])
    assert first.sent() is not second.sent()
    second.adopt(first.standpoint(), 1)  # a follower of a shared write stands where its leader stood
    assert second.sent() is first.sent()
    assert second.feed(records[2:]) == first.feed(records[2:])  # and writes what the leader writes
    assert first.sent() is second.sent()
