"""Hostile zilla.yaml and AsyncAPI documents: wrong types at every level, deep nesting, YAML aliases, huge scalars,
numbers past every range (docs/control-plane.md).

A document either imports (here as a dry run, written and rolled back) or is refused with the format's own error
(`ZillaConfigError`, `AsyncApiImportError`), which the API answers as a 400 naming where the problem is. The
generated documents start from what the exporters write for a configuration using every feature, then have
values replaced by hostile ones, keys removed or renamed, anywhere in the tree.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
import yaml
from hypothesis import example, given, reject
from hypothesis import strategies as st

from bindings.asyncapi.document import AsyncApiImportError, export_asyncapi, import_asyncapi, parse_document
from bindings.documents.yaml_io import DocumentError, load
from bindings.history import Actor
from bindings.models import EVENT_ID_KEY_AND_ETAG
from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla
from tests.support.fuzz import PURE, REQUESTS, mutate
from tests.support.jwt_keys import guard_fields

pytestmark = pytest.mark.django_db

ACTOR = Actor(name="fuzz", source="import")


def nested(depth: int, leaf: Any = 1, *, mapping: bool = False) -> Any:
    for _ in range(depth):
        leaf = {"k": leaf} if mapping else [leaf]
    return leaf


HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**31, 2**63, -(2**63) - 1, 10**400, 1e308, float("inf"), float("-inf"), float("nan"),
    "", " ", "\x00", "x" * 100_000, "${params.nope}", "${", "${guarded['x'].identity}", "/", "..", "{id}", "é\u2028",
    [], {}, [None], [[]], {"": None}, {1: 2}, {None: "x"}, {"$ref": "#/channels"}, {"$ref": "#/nowhere/at/all"},
    {"$ref": "http://example.com/remote"}, {"$ref": 7}, datetime.date(2020, 1, 1), b"\xff\xfe", {1, 2},
    nested(60), nested(60, mapping=True),
]  # fmt: skip
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_VALUES),
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=8,
    ),
)


@pytest.fixture
def exported() -> tuple[dict[str, Any], dict[str, Any]]:
    """What the exporters write (zilla.yaml, AsyncAPI) for a configuration that uses every feature."""
    do_put_endpoint(name="fz-endpoint", keepalive_s=5, retry_ms=1000, cors_origins=["https://a.example"])
    do_put_guard(**guard_fields("fz-jwt", cookie="sse_token", attributes={"tenant": "org.id"}, challenge_s=10))
    do_put_route(
        name="fz-items",
        paths=["/items/{id}", "/things/{id}/latest"],
        topic="items-${params.id}",
        filters=[
            {"key": "${params.id}", "headers": {"kind": "${guarded['fz-jwt'].attributes.tenant}"}},
            {"value": {"path": "status.code", "equals": "open"}},
        ],
        event_id=EVENT_ID_KEY_AND_ETAG,
        start="live",
        caught_up=True,
        slow_client="conflate",
        endpoint="fz-endpoint",
        guarded={"fz-jwt": ["read", "write"]},
    )
    do_put_route(name="fz-plain", path="/plain", topic="plain")
    zilla = yaml.safe_load(export_zilla()[0])
    asyncapi = export_asyncapi("https://sse.example.com")
    return zilla, asyncapi


def located(errors: dict[str, list[str]]) -> None:
    """Each error is a message under the place in the document it is about."""
    assert all(isinstance(where, str) and messages for where, messages in errors.items())


def import_zilla(text: str) -> None:
    errors: dict[str, list[str]] = {}
    try:
        do_import_zilla(text, actor=ACTOR, dry_run=True, prune=True)
    except ZillaConfigError as exc:
        errors = exc.errors or {"": []}
    located(errors)


def import_document(text: str | bytes) -> None:
    errors: dict[str, list[str]] = {}
    try:
        import_asyncapi(parse_document(text), dry_run=True, actor=ACTOR)
    except AsyncApiImportError as exc:
        errors = exc.errors or {"": []}
    located(errors)


def load_or_refuse(text: str | bytes, **how: bool) -> None:
    message = None
    try:
        load(text, **how)
    except DocumentError as exc:
        message = str(exc)
    assert message is None or message


def dumped(document: Any) -> str:
    try:
        return yaml.safe_dump(document)
    except yaml.YAMLError:  # PyYAML's emitter cannot write every generated tree; not what is tested here
        reject()


@REQUESTS
@given(data=st.data(), times=st.integers(1, 3))
def test_a_zilla_yaml_with_hostile_values_anywhere_imports_or_is_a_config_error(
    exported: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject, times: int
) -> None:
    import_zilla(dumped(mutate(exported[0], data, times, HOSTILE)))


@REQUESTS
@given(data=st.data(), times=st.integers(1, 3))
def test_an_asyncapi_document_with_hostile_values_anywhere_imports_or_is_an_import_error(
    exported: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject, times: int
) -> None:
    import_document(dumped(mutate(exported[1], data, times, HOSTILE)))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), datetime.date(2020, 1, 1), b"\xff", {1, 2}], ids=repr)
def test_a_jwk_holding_what_json_cannot_is_a_config_error(
    exported: tuple[dict[str, Any], dict[str, Any]], value: Any
) -> None:
    """Stored as jsonb, such a key was a 500 on save (Postgres refuses NaN and infinity, json.dumps the rest)."""
    document = copy.deepcopy(exported[0])
    document["guards"]["fz-jwt"]["options"]["keys"][0]["x-rotated"] = value
    with pytest.raises(ZillaConfigError) as raised:
        do_import_zilla(yaml.safe_dump(document), actor=ACTOR, dry_run=True)
    assert list(raised.value.errors) == ["guards.fz-jwt.options.keys[0]"]


def billion_laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        previous, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


RAW_DOCUMENTS = [
    "",
    "~",
    "[",
    "- a\n -b",
    "\t",
    # Nested deeply, though not past the parser's limit (tests/bindings/zilla/test_zilla.py and
    # tests/bindings/asyncapi/test_asyncapi.py go past it): what the planners get.
    "bindings: " + "[" * 200 + "]" * 200,
    "bindings: {a: " + "{b: " * 200 + "1" + "}" * 201,
    "asyncapi: 3.0.0\nchannels: {a: {address: /a, messages: " + "{m: " * 200 + "1" + "}" * 201 + "}",
    "a:\n" + "".join(f"{'  ' * depth}b:\n" for depth in range(1, 400)),
    billion_laughs(),
    "bindings: &b {x: *b}",  # an alias inside its own anchor
    "a: &a {b: 1}\nbindings: {<<: *a, c: *a}",  # merge keys
    "bindings: !!python/object:os.system {}",
    "bindings: !!binary /w==",
    "bindings: 1e400",
    "bindings: 0x" + "f" * 1000,
    "bindings: " + "9" * 10000,  # past Python's 4300 digits: was a 500
    "bindings: 2020-13-01",  # a date YAML types and Python cannot make: was a 500
    "name: 0000-01-01 25:00:00",
    "x: '" + "y" * 100_000 + "'",
    "asyncapi: 3.0.0\nchannels: {a: {address: '/a', $ref: '#/channels/a'}}",
    "\ufeffbindings: {}",
    "bindings: {}\n---\nbindings: {}",
]


@pytest.mark.parametrize("text", RAW_DOCUMENTS, ids=range(len(RAW_DOCUMENTS)))
def test_a_hostile_text_loads_or_is_a_document_error(text: str) -> None:
    for aliases in (False, True):
        load_or_refuse(text, aliases=aliases)
    import_zilla(text)
    import_document(text)


@PURE
@given(text=st.text(max_size=200))
@example(text="bindings: {a: {type: sse, kind: server, exit: a}}")
@example(text="bindings: {a: {type: sse-kafka, kind: proxy, routes: [{when: [{path: /a}], with: {topic: 1e400}}]}}")
def test_any_text_loads_or_is_a_document_error(text: str) -> None:
    for aliases in (False, True):
        load_or_refuse(text, aliases=aliases)
    import_zilla(text)
    import_document(text)


@PURE
@given(raw=st.binary(max_size=200))
@example(raw=b"\xff\xfe\x00b\x00i")
@example(raw=b"bindings: {a: \xc3\x28}")
def test_any_bytes_load_or_are_a_document_error(raw: bytes) -> None:
    for is_json in (False, True):
        load_or_refuse(raw, is_json=is_json)
    import_document(raw)
