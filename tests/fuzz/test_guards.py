"""Hostile credentials: garbage tokens, bad base64, deep JSON, huge or odd claims (docs/contract.md §2, §6).

Reading a token from a request never raises; verifying one raises nothing but `InvalidToken`; and a guarded
stream answers such a request 401 or 403, streams it, and never answers 5xx. Signed tokens carry claims of every
JSON type, nesting, size and number, as a careless identity provider might issue them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from hypothesis import example, given
from hypothesis import strategies as st

from bindings.selectors import GuardSpec
from bindings.services import do_put_guard, do_put_route
from streams.access.guards import Grant, InvalidToken, Verifier, credentials
from tests.conftest import unique
from tests.support.fuzz import PURE, REQUESTS, Endpoint, assert_not_a_server_error, endpoint
from tests.support.jwt_keys import AUDIENCE, ISSUER, guard_fields, private_key, public_jwk

__all__ = ["endpoint"]  # the fixture, imported for pytest

SPEC = GuardSpec(
    name="g", issuer=ISSUER, audience=AUDIENCE, keys=json.dumps([public_jwk("k1")]),
    attributes=(("tenant", "org.id"), ("deep", "a.b.c")),
)  # fmt: skip


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(payload: bytes, header: bytes = b'{"alg":"RS256","kid":"k1","typ":"JWT"}') -> str:
    """A token over exactly these payload bytes (any JSON text, even what json.dumps would not write), signed with
    the guard's key."""
    signing_input = f"{b64(header)}.{b64(payload)}"
    signature = private_key("k1").sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64(signature)}"


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
# JSON number texts json.dumps never writes: past float range, past int range, NaN.
odd_numbers = st.sampled_from(["1e400", "-1e400", "1" + "0" * 400, "NaN", "Infinity", "-0", "1.5", "1e-400"])
claim_text = st.one_of(
    json_values.map(json.dumps),
    odd_numbers,
    st.sampled_from(['"\\ud800"', '["\\udfff"]', '"\\u0000"', nested(500), '"' + "x" * 10000 + '"']),
)
garbage_tokens = st.one_of(
    st.text(max_size=80),
    st.lists(st.text(st.characters(codec="ascii"), max_size=20), min_size=1, max_size=5).map(".".join),
    st.lists(st.binary(max_size=40).map(b64), min_size=3, max_size=3).map(".".join),
    st.tuples(json_values.map(json.dumps), json_values.map(json.dumps)).map(
        lambda parts: f"{b64(parts[0].encode())}.{b64(parts[1].encode())}.c2ln"
    ),
    st.integers(min_value=900, max_value=5000).map(lambda depth: f"{b64(nested(depth).encode())}.e30.c2ln"),
)


def verify(token: str) -> Grant:
    return asyncio.run(Verifier(SPEC).verify(token))


@PURE
@given(token=garbage_tokens)
@example(token="")
@example(token="..")
@example(token=f"{b64(nested(5000).encode())}.e30.c2ln")  # a header nested past the parser's recursion limit
@example(token=b64(b'{"kid":"k1","alg":"RS256"}') + ".%%%.!!!")  # bad base64 after a good header
def test_garbage_is_an_invalid_token_and_nothing_else(token: str) -> None:
    with pytest.raises(InvalidToken):
        verify(token)


def payload(claims: dict[str, str]) -> bytes:
    base = {"iss": json.dumps(ISSUER), "aud": json.dumps(AUDIENCE), "exp": str(int(time.time()) + 3600)}
    return ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in {**base, **claims}.items()) + "}").encode()


@PURE
@given(
    claims=st.dictionaries(st.sampled_from(["exp", "nbf", "iat", "sub", "scope", "org", "a", "iss", "aud"]), claim_text)
)
@example(claims={"exp": "1" + "0" * 400})  # an exp past float range: was an OverflowError (a 500)
@example(claims={"exp": "1e300"})
@example(claims={"nbf": "-1e400"})
@example(claims={"sub": '"\\ud800"'})  # a lone surrogate: no UTF-8 write (a filter, the log) can take it
@example(claims={"scope": '["read", "\\udfff"]'})
@example(claims={"org": '{"id": "\\ud800"}'})
@example(claims={"scope": nested(980)})  # nested near the parser's recursion limit
def test_a_signed_token_with_any_claims_verifies_or_is_invalid(claims: dict[str, str]) -> None:
    try:
        grant = verify(signed(payload(claims)))
    except InvalidToken:
        return
    texts = [grant.identity or "", *(grant.roles or ()), *grant.attributes.values()]
    for text in texts:
        text.encode("utf-8")  # what templates and the delivery log write
    if grant.expires_at is not None:
        assert math.isfinite(grant.expires_at)


scopes = st.fixed_dictionaries(
    {},
    optional={
        "headers": st.lists(
            st.tuples(
                st.sampled_from([b"authorization", b"cookie", b"Authorization"]),
                st.binary(max_size=200).map(lambda b: b.translate(None, b"\r\n\x00")),
            ),
            max_size=4,
        ),
        "query_string": st.binary(max_size=200),
    },
)


@PURE
@given(scope=scopes, cookie=st.sampled_from(["", "sse_token", "a b", "\x00"]))
@example(scope={"headers": [(b"cookie", b'sse_token="\\377"; =;;')]}, cookie="sse_token")
@example(scope={"headers": [(b"authorization", b"Bearer \xff\xfe")]}, cookie="")
def test_reading_credentials_never_raises(scope: dict[str, Any], cookie: str) -> None:
    found = credentials(scope, cookie)
    assert found is None or isinstance(found, str)


@pytest.fixture
def guarded_path(new_topic: Callable[..., str]) -> str:
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard, cookie="sse_token", attributes={"tenant": "org.id"}))
    path = "/" + unique("fzg")
    topic = new_topic()
    filters = [{"key": f"${{guarded['{guard}'].identity}}"}]
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]}, filters=filters)
    return path


def where(token: str, place: str) -> dict[str, Any]:
    if place == "header":
        return {"headers": [(b"authorization", b"Bearer " + token.encode("latin-1", "replace"))]}
    if place == "query":
        return {"query": b"access_token=" + token.encode("ascii", "replace").replace(b"&", b"%26")}
    return {"headers": [(b"cookie", b"sse_token=" + token.encode("latin-1", "replace"))]}


@pytest.mark.django_db(transaction=True)
@REQUESTS
@given(
    token=st.one_of(
        garbage_tokens,
        st.dictionaries(st.sampled_from(["exp", "nbf", "sub", "scope", "org"]), claim_text).map(
            lambda claims: signed(payload({"scope": '"read"', **claims}))
        ),
    ),
    place=st.sampled_from(["header", "query", "cookie"]),
)
@example(token=signed(payload({"scope": '"read"', "exp": "1" + "0" * 400})), place="header")
@example(token=signed(payload({"scope": '"read"', "sub": '"\\ud800"'})), place="header")
def test_a_guarded_stream_answers_any_token_without_a_server_error(
    endpoint: Endpoint, guarded_path: str, token: str, place: str
) -> None:
    response = endpoint.call(guarded_path.encode(), **where(token, place))
    assert_not_a_server_error(response)
    assert response.status in {200, 401, 403}, response
