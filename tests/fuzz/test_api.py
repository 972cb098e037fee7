"""Hostile REST API requests (docs/control-plane.md, "The REST API"): bodies of wrong types at every level, nulls,
huge numbers, deep nesting, text Postgres cannot store, bodies that are not JSON or not UTF-8, odd names in URLs and
odd query parameters.

With a staff user's session, every such request is answered below 500, and every error is an RFC 9457 problem.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from hypothesis import example, given
from hypothesis import strategies as st

from bindings.services import do_put_guard, do_revoke
from tests.support.fuzz import REQUESTS, mutate
from tests.support.jwt_keys import public_jwk

pytestmark = pytest.mark.django_db

ROUTE = {
    "name": "fz-items",
    "paths": ["/items/{id}", "/things/{id}"],
    "topic": "items-${params.id}",
    "filters": [
        {"key": "${params.id}", "headers": {"kind": "a"}},
        {"value": {"path": "status.code", "equals": "open"}},
    ],
    "event_id": '["${base64(key)}","${etag}"]',
    "start": "live",
    "caught_up": True,
    "slow_client": "conflate",
    "endpoint": "default",
    "position": 0,
    "guarded": {},
}
ENDPOINT = {"name": "fz-endpoint", "retry_ms": 1000, "keepalive_s": 5, "cors_origins": ["https://a.example"]}
GUARD = {
    "name": "fz-jwt",
    "issuer": "https://auth.example.com",
    "audience": "sse",
    "keys": [public_jwk()],
    "roles_claim": "realm.roles",
    "identity_claim": "sub",
    "attributes": {"tenant": "org.id"},
    "challenge_s": 10,
    "cookie": "sse_token",
}
BODIES = {"routes": ROUTE, "endpoints": ENDPOINT, "guards": GUARD}

# What JSON can carry: every type, numbers past Postgres' and JSON's ranges, text Postgres cannot store.
HOSTILE = st.one_of(
    st.sampled_from(
        [
            None, True, 0, -1, 2**31, 2**63, 10**30, 1e308, 0.5, "", " ", "\x00", "\ud800", "x" * 10_000, "${",
            "${params.nope}", "/", "{id}", "..", [], {}, [None], {"": None}, [[[[[[[[[[[]]]]]]]]]]],
        ]
    ),
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=8,
    ),
)  # fmt: skip


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("fuzz", "fuzz@example.com", "a-long-test-password"))
    return client


def check(response: Any) -> dict[str, Any] | None:
    """The request got no 5xx; an error is a problem body, returned."""
    assert response.status_code < 500, response.content[:500]
    if response.status_code < 400:
        return None
    assert response["content-type"] == "application/problem+json", response.content[:500]
    body: dict[str, Any] = response.json()
    assert body["status"] == response.status_code
    assert isinstance(body["detail"], str)
    return body


@REQUESTS
@given(collection=st.sampled_from(sorted(BODIES)), data=st.data(), times=st.integers(1, 3), put=st.booleans())
def test_a_body_with_wrong_values_anywhere_is_written_or_a_400(
    api: Client, collection: str, data: st.DataObject, times: int, put: bool
) -> None:
    body = mutate(BODIES[collection], data, times, HOSTILE)
    text = json.dumps(body)  # lone surrogates go as JSON's \ud800 escapes
    if put:
        response = api.put(f"/api/v1/{collection}/fz-put/", text, content_type="application/json")
    else:
        response = api.post(f"/api/v1/{collection}/", text, content_type="application/json")
    problem = check(response)
    if problem is not None and response.status_code == 400:
        assert problem["errors"], problem


REVOCATION = {"guard": "fz-jwt", "identity": "alice", "jti": "", "until": "2999-01-01T00:00:00Z", "reason": "fz"}


@REQUESTS
@given(data=st.data(), times=st.integers(1, 3), patch=st.booleans())
def test_a_revocation_with_wrong_values_anywhere_is_written_or_a_400(
    api: Client, data: st.DataObject, times: int, patch: bool
) -> None:
    do_put_guard(**GUARD)  # type: ignore[arg-type]
    body = mutate(REVOCATION, data, times, HOSTILE)
    text = json.dumps(body)
    if patch:
        target = do_revoke(guard="fz-jwt", identity="bob", until=timezone.now() + timedelta(days=1))
        response = api.patch(f"/api/v1/revocations/{target.pk}/", text, content_type="application/json")
    else:
        response = api.post("/api/v1/revocations/", text, content_type="application/json")
    problem = check(response)
    if problem is not None and response.status_code == 400:
        assert problem["errors"], problem


RAW_BODIES = [
    b"",
    b"null",
    b"[]",
    b"7",
    b'"text"',
    b"{",
    b"\xff\xfe",
    b'{"name": "\xff"}',
    b"NaN",
    b'{"name": "a", "retry_ms": NaN}',
    b'{"name": "a", "retry_ms": 1e400}',
    b'{"name": "a", "retry_ms": ' + b"9" * 5000 + b"}",
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"name": "a\\u0000"}',
    b'{"name": "a", "name": "b"}',
]


@REQUESTS
@given(
    collection=st.sampled_from([*sorted(BODIES), "import/zilla", "import/asyncapi"]),
    body=st.one_of(st.sampled_from(RAW_BODIES), st.binary(max_size=100)),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "application/yaml", "application/x-www-form-urlencoded", "", "a/b; x"]
    ),
)
@example(
    collection="endpoints", body=b'{"name": "a", "retry_ms": ' + b"9" * 5000 + b"}", content_type="application/json"
)
@example(collection="import/asyncapi", body=b'{"asyncapi": ' + b"9" * 5000 + b"}", content_type="application/json")
@example(collection="guards", body=b"[" * 5000 + b"]" * 5000, content_type="application/json")  # was a 500
@example(collection="import/zilla", body=b'{"yaml": ' + b"[" * 900 + b"]" * 900 + b"}", content_type="application/json")
def test_a_body_that_is_not_json_or_not_utf8_is_a_4xx(
    api: Client, collection: str, body: bytes, content_type: str
) -> None:
    path = f"/api/v1/{collection}" if collection.startswith("import/") else f"/api/v1/{collection}/"
    check(api.post(path, body, content_type=content_type))


names = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20),
    st.sampled_from(["..", ".", "%00", "a%2Fb", "x" * 300, "default", "%ff"]),
)


@REQUESTS
@given(
    collection=st.sampled_from(sorted(BODIES)),
    name=names,
    method=st.sampled_from(["get", "put", "patch", "delete"]),
)
def test_any_name_in_the_url_is_found_or_not_found(api: Client, collection: str, name: str, method: str) -> None:
    url = f"/api/v1/{collection}/{quote(name, safe='%')}/"
    if method in {"get", "delete"}:
        check(getattr(api, method)(url))
    else:
        check(
            getattr(api, method)(url, json.dumps({**BODIES[collection], "name": name}), content_type="application/json")
        )


LIST_QUERY_KEYS = ["limit", "offset", "search", "topic", "endpoint", "guard", "ordering", "kind", "format"]
LIST_QUERY_KEYS += ["identity", "jti", "active"]  # revocations'


@REQUESTS
@given(
    collection=st.sampled_from([*sorted(BODIES), "changes", "revocations"]),
    query=st.dictionaries(
        st.sampled_from(LIST_QUERY_KEYS),
        st.one_of(st.text(max_size=20), st.sampled_from(["-1", "99999999999999999999", "1e3", "\x00", "0"])),
        max_size=4,
    ),
)
@example(collection="routes", query={"limit": "99999999999999999999"})
@example(collection="routes", query={"search": "\x00"})
@example(collection="changes", query={"offset": "99999999999999999999"})
def test_any_query_on_a_list_is_an_answer_or_a_400(api: Client, collection: str, query: dict[str, str]) -> None:
    check(api.get(f"/api/v1/{collection}/", query))


@REQUESTS
@given(
    dry_run=st.one_of(st.sampled_from(["1", "0", "true", "no", "", "\x00", "2"]), st.text(max_size=5)),
    server=st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["http://", "https://[::1", "ftp://x", "//x"])),
)
def test_the_document_flags_and_server_are_checked(api: Client, dry_run: str, server: str | None) -> None:
    check(api.post(f"/api/v1/import/asyncapi?dry_run={quote(dry_run)}", b"asyncapi: 3.0.0", content_type="text/yaml"))
    check(api.post(f"/api/v1/import/zilla?dry_run={quote(dry_run)}", b"bindings: {}", content_type="text/yaml"))
    query = {} if server is None else {"server": server}
    check(api.get("/api/v1/asyncapi.yaml", query))
    check(api.get("/api/v1/export/zilla", {"strict": dry_run}))
