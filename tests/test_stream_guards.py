"""JWT guards on a live daphne (SPEC.md §1, §2, §6): 401, 403, where tokens come from, identity templates, the
first route that authorises, and a stream that ends when its token does."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from bindings.services import do_put_guard, do_put_route
from tests.conftest import unique
from tests.jwt_keys import guard_fields, token
from tests.sse_client import EventStream

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
    ],
    ids=["expired", "issuer", "audience", "unknown-kid", "signature", "garbage"],
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


def test_a_token_without_identity_is_not_challenged(
    daphne_url: str, new_topic: Callable[..., str], challenging_guard: str
) -> None:
    path = guarded_route(new_topic(), challenging_guard, ["read"])
    stream = EventStream(daphne_url + path, headers=bearer(token(None, expires_in=3)), timeout=8)
    with stream, pytest.raises(StopIteration):  # no challenge event, then the end
        stream.next_event(timeout=6)
