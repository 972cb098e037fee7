"""streams/routes/expressions.py: an expression filter is shared by the streams with the same variables and
evaluates each record once for all of them; variables are values, never text of the expression; a failure on
one record is no match, counted."""

from __future__ import annotations

import json

from bindings.selectors import FilterSpec
from streams.kafka.client import Record
from streams.routes.expressions import ExpressionStats
from streams.routes.filters import compile_filters, matches_any

SPEC = (FilterSpec(expression='value.item.region == params.region && guarded.jwt.attributes.tier == "gold"'),)
GOLD = {"jwt": {"identity": "alice", "attributes.tier": "gold"}}


def record(offset: int, value: object) -> Record:
    return Record(partition=0, offset=offset, key=b"k", value=json.dumps(value).encode(), headers=())


def test_it_matches_on_a_nested_field_a_param_and_a_guard_attribute() -> None:
    filters = compile_filters(SPEC, {"region": "eu"}, GOLD)
    assert matches_any(filters, record(0, {"item": {"region": "eu"}}))
    assert not matches_any(filters, record(1, {"item": {"region": "us"}}))
    silver = {"jwt": {"identity": "bob", "attributes.tier": "silver"}}
    assert not matches_any(compile_filters(SPEC, {"region": "eu"}, silver), record(2, {"item": {"region": "eu"}}))


def test_a_param_is_a_value_never_text_of_the_expression() -> None:
    filters = compile_filters(SPEC, {"region": '" || true || "'}, GOLD)
    assert not matches_any(filters, record(0, {"item": {"region": "eu"}}))


def test_streams_with_the_same_variables_share_one_filter_that_evaluates_a_record_once() -> None:
    first, second = compile_filters(SPEC, {"region": "eu"}, GOLD), compile_filters(SPEC, {"region": "eu"}, GOLD)
    assert first[0].expression is second[0].expression
    assert compile_filters(SPEC, {"region": "us"}, GOLD)[0].expression is not first[0].expression
    broken = record(0, {"item": "not an object"})
    before = ExpressionStats.failures
    for _ in range(100):
        assert not matches_any(first, broken)
        assert not matches_any(second, broken)
    assert ExpressionStats.failures - before == 1  # one evaluation for 200 streams' reads


def test_every_condition_of_a_filter_must_match_beside_the_expression() -> None:
    spec = (FilterSpec(key="k", expression="value.n > 1"),)
    filters = compile_filters(spec, {}, None)
    assert matches_any(filters, record(0, {"n": 2}))
    assert not matches_any(filters, Record(0, 1, b"other", b'{"n": 2}', ()))
    assert not matches_any(filters, record(2, {"n": 1}))
