"""Paths, patterns, templates and topic names from anywhere (docs/contract.md §1, §2).

A request path in any ASCII, percent-escapes valid or not, matches or does not, and never raises; a pattern or
template an operator types is accepted or refused with a `PatternError`; a topic name is one Kafka accepts
exactly when `is_topic_name` says so: 1 to 249 of `[a-zA-Z0-9._-]`, and neither `.` nor `..`.
"""

from __future__ import annotations

import string
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bindings.patterns import (
    PatternError,
    check_expressions,
    check_topic_name,
    check_value_path,
    is_topic_name,
    parse_path,
    render,
)
from bindings.selectors import RouteSpec
from streams.routes.matching import compile_routes, match_all, path_segments
from tests.support.fuzz import PURE

KAFKA_CHARACTERS = string.ascii_letters + string.digits + "._-"

topic_names = st.one_of(
    st.text(st.sampled_from(KAFKA_CHARACTERS), max_size=260),
    st.text(st.sampled_from(".-"), max_size=4),
    st.text(max_size=30),
    st.integers(min_value=240, max_value=300).map(lambda n: "a" * n),
)


@PURE
@given(topic_names)
@example("")
@example(".")
@example("..")
@example("...")
@example("a" * 249)
@example("a" * 250)
@example("a\n")  # `$` in a regex would match before a final newline
@example("\u0661")  # a digit to Unicode, not to Kafka
def test_a_topic_name_is_what_kafka_accepts(name: str) -> None:
    kafka_accepts = 1 <= len(name) <= 249 and set(name) <= set(KAFKA_CHARACTERS) and name not in {".", ".."}
    assert is_topic_name(name) is kafka_accepts
    if "$" not in name:  # no placeholder: what a route's topic is checked for on save
        if kafka_accepts:
            check_topic_name(name)
        else:
            with pytest.raises(PatternError):
                check_topic_name(name)


@PURE
@given(st.text(max_size=60))
@example("/{a}/{a}")
@example("/{}")
@example("/{{a}}")
@example("/a?b")
def test_a_pattern_parses_or_is_a_pattern_error(text: str) -> None:
    try:
        pattern = parse_path(text)
    except PatternError as exc:
        message = str(exc)
    else:
        message = ""
        assert pattern.text == text
        assert len(pattern.segments) == text.count("/")
    assert message or text.startswith("/")


templates = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.one_of(
            st.text(max_size=6),
            st.sampled_from(["${params.id}", "${params.}", "${guarded['g'].identity}", "${guarded['g'].attributes.x}"]),
            st.sampled_from(["${guarded[", "${", "}", "${params.${params.a}}", "${guarded['g'].attributes.}"]),
        ),
        max_size=5,
    ).map("".join),
)


@PURE
@given(templates, st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
def test_a_template_checks_or_is_a_pattern_error_and_always_renders(template: str, params: dict[str, str]) -> None:
    try:
        check_expressions(template, guards=["g"])
    except PatternError as exc:
        assert exc.args  # noqa: PT017  (a message the admin and the API show)
    rendered = render(template, params, {"g": {"identity": "alice"}})
    assert isinstance(rendered, str)


@PURE
@given(st.text(max_size=30))
def test_a_value_path_checks_or_is_a_pattern_error(path: str) -> None:
    try:
        check_value_path(path)
    except PatternError:
        assert path == "" or ".." in path or path.startswith(".") or path.endswith(".")


ROUTES = compile_routes(
    [
        RouteSpec("literal", ("/items",), "items"),
        RouteSpec("param", ("/items/{id}", "/a/{x}/b/{y}"), "item-${params.id}"),
        RouteSpec("broken", ("no slash",), "never"),  # a pattern that no longer parses is skipped
    ]
)
escape = st.sampled_from(["%", "%2", "%zz", "%2F", "%2E", "%C3", "%C3%28", "%FF", "%00", "%25", "%E2%82"])
raw_segment = st.lists(st.one_of(st.text(st.characters(codec="ascii"), max_size=6), escape), max_size=3).map("".join)


@PURE
@given(st.lists(raw_segment, max_size=5).map(lambda parts: "/" + "/".join(parts)), st.booleans())
@example("/items/%C3%28", False)
@example("/items/%FF%FE", False)
@example("/a/%2F/b/%00", False)
@example("/items", True)
def test_any_raw_path_matches_or_not_and_params_are_decoded_text(path: str, relative: bool) -> None:
    raw = path.lstrip("/") if relative else path
    found = match_all(ROUTES, raw)
    if relative:
        assert found == []
        assert path_segments(raw) == []
    for match in found:
        assert match.route.name in {"literal", "param"}
        for value in match.params.values():
            assert value  # an empty segment matches no {param}
            value.encode("utf-8")  # invalid escapes decode to U+FFFD, never to lone surrogates
        assert isinstance(match.topic, str)


@PURE
@given(st.text(min_size=1, max_size=20))
def test_a_percent_encoded_param_decodes_to_what_was_encoded(value: str) -> None:
    found = match_all(ROUTES, "/items/" + quote(value.encode("utf-8", "surrogatepass"), safe=""))
    assert found, value
    expected = value.encode("utf-8", "surrogatepass").decode("utf-8", errors="replace")
    assert found[0].params == {"id": expected}
