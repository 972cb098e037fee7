"""JWT guards on a live daphne (docs/contract.md §1, §2, §6): 401, 403, where tokens come from, identity
templates, the first route that authorises, and a stream that ends when its token does."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt as pyjwt
import pytest
from django.conf import settings
from jwt.algorithms import RSAAlgorithm

from bindings.services import do_put_guard, do_put_route
from streams.kafka.admin import ensure_topic
from tests.conftest import unique
from tests.support.jwt_keys import AUDIENCE, ISSUER, guard_fields, private_key, public_jwk, token
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def guard() -> str:
    name = unique("jwt")
    do_put_guard(**guard_fields(name, cookie="sse_token", attributes={"tenant": "org.id"}))
    return name


def guarded_route(topic: str, guard: str, roles: list[str], **extra: object) -> str:
    path = "/" + unique("g")
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: roles}, **extra)  # type: ignore[arg-type]
    return path


def base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def critical(header: dict[str, object]) -> str:
    """A token otherwise valid whose header lists `crit` extensions (RFC 7515 §4.1.11), signed by hand: PyJWT's
    encoder drops `b64: true`."""
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "scope": "read", "exp": int(time.time()) + 3600}
    signing_input = ".".join(
        base64url(json.dumps(part).encode()) for part in ({"alg": "RS256", "kid": "k1", **header}, claims)
    )
    signature = RSAAlgorithm(RSAAlgorithm.SHA256).sign(signing_input.encode(), private_key())
    return f"{signing_input}.{base64url(signature)}"


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


def test_no_token_is_401_with_a_bearer_challenge_and_a_problem_body(
    daphne_url: str, new_topic: Callable[..., str], guard: str
) -> None:
    path = guarded_route(new_topic(), guard, ["read"])
    response = httpx.get(daphne_url + path, timeout=5)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="sse"'
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 401


@pytest.mark.parametrize(
    "make_token",
    [
        lambda: token(expires_in=-5),
        lambda: token(issuer="https://someone.else"),
        lambda: token(audience="another-api"),
        lambda: token(kid="unknown"),
        lambda: token()[:-4] + "AAAA",  # a signature that does not verify
        lambda: "not-a-jwt",
        lambda: critical({"crit": ["x"], "x": "must-be-understood"}),
        lambda: critical({"crit": ["b64"], "b64": True}),
    ],
    ids=["expired", "issuer", "audience", "unknown-kid", "signature", "garbage", "crit", "crit-b64"],
)
def test_a_token_that_does_not_verify_is_401(
    daphne_url: str, new_topic: Callable[..., str], guard: str, make_token: Callable[[], str]
) -> None:
    path = guarded_route(new_topic(), guard, ["read"])
    response = httpx.get(daphne_url + path, headers=bearer(make_token()), timeout=5)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="sse", error="invalid_token"'


def test_a_valid_token_without_the_roles_is_403(daphne_url: str, new_topic: Callable[..., str], guard: str) -> None:
    path = guarded_route(new_topic(), guard, ["read", "items"])
    response = httpx.get(daphne_url + path, headers=bearer(token(scope="read")), timeout=5)
    assert response.status_code == 403
    assert response.json()["title"] == "Forbidden"
    no_roles_claim = token(scope=None)  # type: ignore[arg-type]
    assert httpx.get(daphne_url + path, headers=bearer(no_roles_claim), timeout=5).status_code == 403


@pytest.mark.parametrize("where", ["header", "query", "cookie"])
def test_a_valid_token_streams_from_the_header_the_query_or_the_guards_cookie(
    daphne_url: str,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    guard: str,
    where: str,
) -> None:
    topic = new_topic()
    produce(topic, b"secret")
    path = guarded_route(topic, guard, ["read"])
    value = token(scope=["read", "write"])
    url, headers = daphne_url + path, {}
    if where == "header":
        headers = bearer(value)
    elif where == "query":
        url += f"?access_token={value}"
    else:
        headers = {"cookie": f"other=1; sse_token={value}"}
    with EventStream(url, headers=headers) as stream:
        assert stream.response.status_code == 200
        assert stream.next_event().text == "secret"


def test_identity_and_attributes_fill_the_filters(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    topic = new_topic()
    for key, tenant, value in (("alice", "acme", b"a1"), ("bob", "acme", b"b1"), ("alice", "other", b"a2")):
        produce(topic, value, key=key.encode(), headers=[("tenant", tenant.encode())])
    produce(topic, b"a3", key=b"alice", headers=[("tenant", b"acme")])
    path = guarded_route(
        topic,
        guard,
        [],
        filters=[
            {
                "key": f"${{guarded['{guard}'].identity}}",
                "headers": {"tenant": f"${{guarded['{guard}'].attributes.tenant}}"},
            }
        ],
    )
    alice = token("alice", org={"id": "acme"})
    with EventStream(daphne_url + path, headers=bearer(alice)) as stream:
        assert [event.text for event in stream.events(2)] == ["a1", "a3"]


def test_the_first_route_that_authorises_serves(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    private, public = new_topic(), new_topic()
    produce(private, b"private")
    produce(public, b"public")
    path = "/" + unique("both")
    do_put_route(name=path[1:] + "-admin", path=path, topic=private, guarded={guard: ["admin"]}, position=0)
    do_put_route(name=path[1:] + "-anyone", path=path, topic=public, position=1)
    with EventStream(daphne_url + path, headers=bearer(token(scope="admin"))) as stream:
        assert stream.next_event().text == "private"
    with EventStream(daphne_url + path, headers=bearer(token(scope="read"))) as stream:
        assert stream.next_event().text == "public"
    with EventStream(daphne_url + path) as stream:
        assert stream.next_event().text == "public"


def test_the_stream_ends_when_the_token_expires(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    topic = new_topic()
    produce(topic, b"before")
    path = guarded_route(topic, guard, ["read"])
    started = time.monotonic()
    with EventStream(daphne_url + path, headers=bearer(token(expires_in=2)), timeout=8) as stream:
        assert stream.next_event().text == "before"
        with pytest.raises(StopIteration):  # the server ended the response
            stream.next_event(timeout=8)
    assert 1.0 < time.monotonic() - started < 6


def challenge_response(daphne_url: str, path: str, new_token: str | None) -> httpx.Response:
    headers = {"content-type": "application/x-challenge-response"}
    if new_token is not None:
        headers["authorization"] = f"Bearer {new_token}"
    return httpx.post(daphne_url + path, headers=headers, timeout=5)


@pytest.fixture
def challenging_guard() -> str:
    name = unique("jwt")
    do_put_guard(**guard_fields(name, challenge_s=2))
    return name


def test_a_challenge_answered_with_a_new_token_keeps_the_stream_open(
    daphne_url: str,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    challenging_guard: str,
) -> None:
    topic = new_topic()
    path = guarded_route(topic, challenging_guard, ["read"])
    with EventStream(daphne_url + path, headers=bearer(token("alice", expires_in=3)), timeout=8) as stream:
        challenge = stream.next_event(timeout=5)  # about 1 s in: 2 s before the token expires
        assert challenge.event == "challenge"
        assert challenge.text == '{"method":"POST","headers":{"content-type":"application/x-challenge-response"}}'
        # Answers are always 204: a token of someone else, none at all, then the right one (to another path).
        assert challenge_response(daphne_url, path, token("mallory", expires_in=60)).status_code == 204
        assert challenge_response(daphne_url, path, None).status_code == 204
        assert challenge_response(daphne_url, "/any/stream/path", token("alice", expires_in=60)).status_code == 204
        time.sleep(3)  # past the first token's expiry
        produce(topic, b"after the first token expired")
        assert stream.next_event(timeout=5).text == "after the first token expired"


def test_an_unanswered_challenge_ends_the_stream_at_expiry(
    daphne_url: str, new_topic: Callable[..., str], challenging_guard: str
) -> None:
    path = guarded_route(new_topic(), challenging_guard, ["read"])
    with EventStream(daphne_url + path, headers=bearer(token("alice", expires_in=3)), timeout=8) as stream:
        assert stream.next_event(timeout=5).event == "challenge"
        # A renewal without the route's roles, or for someone else, renews nothing.
        assert challenge_response(daphne_url, path, token("alice", scope="other", expires_in=60)).status_code == 204
        assert challenge_response(daphne_url, path, token("mallory", expires_in=60)).status_code == 204
        with pytest.raises(StopIteration):
            stream.next_event(timeout=6)


@pytest.fixture
def tenant_route(new_topic: Callable[..., str]) -> tuple[str, str]:
    """A challenging guard's route that gives each tenant only its own records: (path, topic)."""
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard, challenge_s=2, attributes={"tenant": "org.id"}))
    topic = new_topic()
    tenant = f"${{guarded['{guard}'].attributes.tenant}}"
    return guarded_route(topic, guard, ["read"], filters=[{"headers": {"tenant": tenant}}]), topic


def test_a_renewal_that_changes_what_the_stream_reads_does_not_extend_it(
    daphne_url: str, tenant_route: tuple[str, str]
) -> None:
    path, _ = tenant_route
    acme = token("alice", expires_in=3, org={"id": "acme"})
    with EventStream(daphne_url + path, headers=bearer(acme), timeout=8) as stream:
        assert stream.next_event(timeout=5).event == "challenge"
        other_tenant = token("alice", expires_in=60, org={"id": "other"})
        assert challenge_response(daphne_url, path, other_tenant).status_code == 204
        with pytest.raises(StopIteration):  # ended at the first token's expiry
            stream.next_event(timeout=6)


def test_a_renewal_with_the_same_values_extends_the_stream(
    daphne_url: str, tenant_route: tuple[str, str], produce: Callable[..., tuple[int, int]]
) -> None:
    path, topic = tenant_route
    acme = token("alice", expires_in=3, org={"id": "acme"})
    with EventStream(daphne_url + path, headers=bearer(acme), timeout=8) as stream:
        assert stream.next_event(timeout=5).event == "challenge"
        renewed = token("alice", expires_in=60, org={"id": "acme"}, name="Alice")  # a claim the route does not read
        assert challenge_response(daphne_url, path, renewed).status_code == 204
        time.sleep(3)  # past the first token's expiry
        produce(topic, b"other's", headers=[("tenant", b"other")])
        produce(topic, b"acme's", headers=[("tenant", b"acme")])
        assert stream.next_event(timeout=5).text == "acme's"


def test_a_token_without_identity_is_not_challenged(
    daphne_url: str, new_topic: Callable[..., str], challenging_guard: str
) -> None:
    path = guarded_route(new_topic(), challenging_guard, ["read"])
    stream = EventStream(daphne_url + path, headers=bearer(token(None, expires_in=3)), timeout=8)
    with stream, pytest.raises(StopIteration):  # no challenge event, then the end
        stream.next_event(timeout=6)


class Jwks:
    """A JWKS endpoint of our own (an identity provider stand-in): serves whatever `body` holds."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.content_type = "application/json"
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", jwks.content_type)
                self.send_header("content-length", str(len(jwks.body)))
                self.end_headers()
                self.wfile.write(jwks.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, keys: list[dict[str, object]]) -> None:
        self.body = json.dumps({"keys": keys}).encode()


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    server = Jwks()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def test_a_guard_reads_its_keys_from_a_jwks_url(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], jwks: Jwks
) -> None:
    topic = new_topic()
    produce(topic, b"m")
    jwks.serve([public_jwk()])
    name = unique("jwks")
    do_put_guard(**guard_fields(name, keys=[], jwks_url=jwks.url))
    path = guarded_route(topic, name, ["read"])
    with EventStream(daphne_url + path, headers=bearer(token())) as stream:
        assert stream.next_event().text == "m"
    assert httpx.get(daphne_url + path, headers=bearer(token(kid="k2")), timeout=5).status_code == 401


def test_a_secret_published_in_a_jwks_verifies_nothing(
    daphne_url: str, new_topic: Callable[..., str], jwks: Jwks
) -> None:
    secret = "a-secret-anyone-can-read-at-the-jwks-url-0123456789"
    jwks.serve([{"kty": "oct", "kid": "s", "alg": "HS256", "k": base64url(secret.encode())}])
    name = unique("jwks")
    do_put_guard(**guard_fields(name, keys=[], jwks_url=jwks.url))
    path = guarded_route(new_topic(), name, [])
    forged = pyjwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "scope": "read"}, secret, "HS256", headers={"kid": "s"}
    )
    assert httpx.get(daphne_url + path, headers=bearer(forged), timeout=5).status_code == 401


def test_unreadable_keys_are_a_503_not_a_500(daphne_url: str, new_topic: Callable[..., str], jwks: Jwks) -> None:
    jwks.body, jwks.content_type = b"<html>maintenance</html>", "text/html"
    name = unique("jwks")
    do_put_guard(**guard_fields(name, keys=[], jwks_url=jwks.url))
    path = guarded_route(new_topic(), name, [])
    response = httpx.get(daphne_url + path, headers=bearer(token()), timeout=10)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["status"] == 503


def test_a_jwks_document_over_the_size_limit_is_a_503(
    daphne_url: str, new_topic: Callable[..., str], jwks: Jwks
) -> None:
    jwks.body = json.dumps(
        {"keys": [public_jwk()], "padding": "x" * 300 * 1024}
    ).encode()  # SSE_JWKS_MAX_BYTES: 256 KiB
    name = unique("jwks")
    do_put_guard(**guard_fields(name, keys=[], jwks_url=jwks.url))
    path = guarded_route(new_topic(), name, [])
    response = httpx.get(daphne_url + path, headers=bearer(token()), timeout=15)
    assert response.status_code == 503
    assert response.json()["detail"] == "The keys that verify tokens for this stream cannot be read now."


def test_a_token_lacking_a_value_the_route_reads_is_403(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    topic = new_topic()
    produce(topic, b"keyless", key=b"")
    path = guarded_route(topic, guard, [], filters=[{"key": f"${{guarded['{guard}'].attributes.tenant}}"}])
    without_tenant = token()  # no org.id claim: the filter would otherwise be the empty key
    response = httpx.get(daphne_url + path, headers=bearer(without_tenant), timeout=5)
    assert response.status_code == 403
    assert "attributes.tenant" in response.json()["detail"]


def test_a_token_without_the_identity_claim_is_403_where_the_route_reads_identity(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    topic = new_topic()
    produce(topic, b"keyless", key=b"")  # what an identity rendered empty would select
    produce(topic, b"public")
    reads = guarded_route(topic, guard, [], filters=[{"key": f"${{guarded['{guard}'].identity}}"}])
    response = httpx.get(daphne_url + reads, headers=bearer(token(None)), timeout=5)
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert "identity claim 'sub' is missing" in response.json()["detail"]
    in_topic = guarded_route(f"{topic}-${{guarded['{guard}'].identity}}", guard, [])
    assert httpx.get(daphne_url + in_topic, headers=bearer(token(None)), timeout=5).status_code == 403
    ignores = guarded_route(topic, guard, [])
    with EventStream(daphne_url + ignores, headers=bearer(token(None))) as stream:
        assert stream.response.status_code == 200
        assert stream.next_event().text == "keyless"


def test_a_path_parameter_cannot_reach_another_tenants_topic_through_the_separator(
    daphne_url: str, created_topics: list[str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    prefix = unique("t")
    for tenant, stream_name in (("a-b", "x"), ("a", "y")):
        topic = f"{prefix}-{tenant}-{stream_name}"
        ensure_topic(settings.KAFKA, topic)
        created_topics.append(topic)
        produce(topic, f"{tenant}'s".encode())
    path = "/" + unique("tenant")
    topic = f"{prefix}-${{guarded['{guard}'].attributes.tenant}}-${{params.s}}"
    do_put_route(name=path[1:], path=path + "/{s}", topic=topic, guarded={guard: []})
    a, a_b = token(org={"id": "a"}), token(org={"id": "a-b"})
    for reach in ("b-x", "b%2Dx"):  # tenant a asking for t-a-b-x, tenant a-b's topic
        response = httpx.get(f"{daphne_url}{path}/{reach}", headers=bearer(a), timeout=5)
        assert response.status_code == 403
        assert response.headers["content-type"] == "application/problem+json"
        assert "${params.s} is 'b-x', which holds '-'" in response.json()["detail"]
    with EventStream(f"{daphne_url}{path}/x", headers=bearer(a_b)) as stream:  # a tenant holding '-' is served
        assert stream.next_event().text == "a-b's"
    with EventStream(f"{daphne_url}{path}/y", headers=bearer(a)) as stream:
        assert stream.next_event().text == "a's"


def test_a_string_exp_still_ends_the_stream_and_a_future_iat_is_accepted(
    daphne_url: str, new_topic: Callable[..., str], guard: str
) -> None:
    path = guarded_route(new_topic(), guard, ["read"])
    soon = str(int(time.time()) + 2)
    odd = token(expires_in=3600, iat=int(time.time()) + 30, exp=soon)
    stream = EventStream(daphne_url + path, headers=bearer(odd), timeout=8)
    assert stream.response.status_code == 200
    with stream, pytest.raises(StopIteration):
        stream.next_event(timeout=6)


def test_a_token_without_exp_is_401_unless_the_guard_allows_it(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], guard: str
) -> None:
    topic = new_topic()
    produce(topic, b"m")
    path = guarded_route(topic, guard, ["read"])
    response = httpx.get(daphne_url + path, headers=bearer(token(expires_in=None)), timeout=5)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 401
    lenient = unique("jwt")
    do_put_guard(**guard_fields(lenient, allow_tokens_without_exp=True))
    path = guarded_route(topic, lenient, ["read"])
    with EventStream(daphne_url + path, headers=bearer(token(expires_in=None))) as stream:
        assert stream.response.status_code == 200
        assert stream.next_event().text == "m"


def test_an_identity_that_makes_no_topic_name_is_404(daphne_url: str, guard: str) -> None:
    path = guarded_route(f"user-${{guarded['{guard}'].identity}}", guard, [])
    response = httpx.get(daphne_url + path, headers=bearer(token("alice@example.com")), timeout=5)
    assert response.status_code == 404
    assert response.json()["topic"] == "user-alice@example.com"


def test_an_exp_past_a_floats_range_streams_as_if_it_never_came(
    daphne_url: str, new_topic: Callable[..., str], guard: str
) -> None:
    path = guarded_route(new_topic(), guard, ["read"])
    with EventStream(daphne_url + path, headers=bearer(token(exp=10**400)), timeout=5) as stream:
        assert stream.response.status_code == 200  # was a 500: float(10**400) overflows
        assert stream.next_block().retry == 2000


def test_an_identity_with_a_lone_surrogate_is_401(daphne_url: str, new_topic: Callable[..., str], guard: str) -> None:
    path = guarded_route(new_topic(), guard, ["read"], filters=[{"key": f"${{guarded['{guard}'].identity}}"}])
    response = httpx.get(daphne_url + path, headers=bearer(token("\ud800")), timeout=5)  # `"sub":"\ud800"` in JSON
    assert response.status_code == 401  # was a 500: the identity cannot be written as UTF-8
