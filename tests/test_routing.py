"""Path patterns and route matching (docs/contract.md §1)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bindings.patterns import PatternError, check_topic, parse_path
from bindings.selectors import RouteSpec
from streams.routing import compile_routes, match_path

ROUTES = compile_routes(
    [
        RouteSpec("one", ("/items",), "items"),
        RouteSpec("two", ("/items/{id}", "/things/{id}/latest"), "item-${params.id}"),
        RouteSpec("three", ("/items/{id}",), "never"),
    ]
)


def test_it_matches_a_literal_path() -> None:
    found = match_path(ROUTES, "/items")
    assert found is not None
    assert found.topic == "items"


def test_it_matches_one_segment_per_param_and_the_first_route_wins() -> None:
    found = match_path(ROUTES, "/items/42")
    assert found is not None
    assert (found.route.name, found.params, found.topic) == ("two", {"id": "42"}, "item-42")


def test_any_condition_of_a_route_matches() -> None:
    found = match_path(ROUTES, "/things/7/latest")
    assert found is not None
    assert (found.route.name, found.topic) == ("two", "item-7")


def test_a_param_never_spans_segments() -> None:
    assert match_path(ROUTES, "/items/a/b") is None


def test_params_are_percent_decoded() -> None:
    found = match_path(ROUTES, "/items/a%2Fb")
    assert found is not None
    assert found.params == {"id": "a/b"}


def test_unknown_paths_do_not_match() -> None:
    assert match_path(ROUTES, "/other") is None
    assert match_path(ROUTES, "/items/") is None


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("items", "starts with '/'"),
        ("/items/{id", "whole segment"),
        ("/items/{1x}", "letters"),
        ("/a/{x}/{x}", "twice"),
        ("/a?x=1", "query"),
    ],
)
def test_it_rejects_bad_patterns(pattern: str, message: str) -> None:
    with pytest.raises(PatternError, match=message):
        parse_path(pattern)


def test_it_rejects_undeclared_params_and_bad_topic_names() -> None:
    with pytest.raises(PatternError, match="not declared"):
        check_topic("items-${params.nope}", frozenset({"id"}))
    with pytest.raises(PatternError, match="249"):
        check_topic("bad topic", frozenset())
    for forbidden in (".", ".."):
        with pytest.raises(PatternError, match="does not allow"):
            check_topic(forbidden, frozenset())


@given(st.text())
def test_matching_never_raises_on_arbitrary_paths(path: str) -> None:
    match_path(ROUTES, "/" + path)


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_templating_never_raises_on_arbitrary_paths(segment: str) -> None:
    found = match_path(ROUTES, "/items/" + quote(segment, safe=""))
    if segment:
        assert found is not None
        assert found.params == {"id": segment}  # one whole segment, decoded, even with '/' inside
        assert found.topic == "item-" + segment
