"""Path patterns and route matching (docs/contract.md §1)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bindings.patterns import (
    PatternError,
    check_topic,
    inseparable_values,
    parse_path,
    render,
    touching_placeholders,
)
from bindings.selectors import RouteSpec
from streams.routes.matching import compile_routes, match_path

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


# --- values that cannot be told apart (docs/contract.md §1) ---------------------------------------------------

TENANT_TOPIC = "t-${guarded['jwt'].attributes.tenant}-${params.s}"


def tenant(value: str) -> dict[str, dict[str, str]]:
    return {"jwt": {"attributes.tenant": value}}


def test_a_path_parameter_may_not_hold_the_separator_next_to_it() -> None:
    # Tenant a asking for s=b-x would read t-a-b-x, the topic of tenant a-b with s=x.
    assert inseparable_values(TENANT_TOPIC, {"s": "b-x"}, tenant("a")) == [("params.s", "b-x", "-")]
    # Tenant a-b reads its own topic: a lone guarded value is the token's, and may hold it.
    assert inseparable_values(TENANT_TOPIC, {"s": "x"}, tenant("a-b")) == []
    assert inseparable_values(TENANT_TOPIC, {"s": "b.x_y"}, tenant("a")) == []  # other characters are no separator
    assert inseparable_values("t-${params.s}", {"s": "b-x"}, {}) == []  # no guarded value, no tenant to cross


def test_with_two_guarded_values_each_may_not_hold_its_separator() -> None:
    template = "t.${guarded['jwt'].attributes.tenant}-${params.s}.${guarded['jwt'].identity}"
    guarded = {"jwt": {"attributes.tenant": "a-b", "identity": "alice"}}
    assert inseparable_values(template, {"s": "x"}, guarded) == [("guarded['jwt'].attributes.tenant", "a-b", "-")]


@given(
    st.tuples(st.text("ab-", min_size=1, max_size=4), st.text("ab-", min_size=1, max_size=4)),
    st.tuples(st.text("ab-", min_size=1, max_size=4), st.text("ab-", min_size=1, max_size=4)),
    st.sampled_from(
        [
            TENANT_TOPIC,
            "${params.s}-${guarded['jwt'].attributes.tenant}",
            "${params.s}-t-${guarded['jwt'].attributes.tenant}-${params.s}",
            "${guarded['jwt'].attributes.tenant}-${params.s}-${guarded['jwt'].identity}",
        ]
    ),
)
def test_values_the_rule_lets_through_never_render_what_other_values_do(
    one: tuple[str, str], other: tuple[str, str], template: str
) -> None:
    renders = []
    for value, param in (one, other):
        guarded = {"jwt": {"attributes.tenant": value, "identity": value}}
        if inseparable_values(template, {"s": param}, guarded):
            return
        renders.append(render(template, {"s": param}, guarded))
    if renders[0] == renders[1]:
        assert one[0] == other[0]


def test_placeholders_that_touch_in_a_guarded_template_are_named() -> None:
    assert touching_placeholders("t-${guarded['jwt'].identity}${params.s}") == [
        "${guarded['jwt'].identity} and ${params.s} touch: put a separator between them (e.g. '-'), which values "
        "filled in next to it may then not contain."
    ]
    assert touching_placeholders("t-${params.a}${params.b}") == []  # no token's value to reach past
