"""Forwarded headers count only from the edge or a trusted proxy (streams/server/forwarded.py), on the live server.

platform/web.py runs its edge (`web`): whatever `X-Forwarded-For` a client writes, on either port, the edge
replaces it with the client's address, which the workers believe from the edge alone. A client on 127.0.0.2,
which the loopback interface also answers, is counted as 127.0.0.2 by the per-address stream limit and the
admin's sign-in lockout.

Without the edge (`proxied`: `WEB_EDGE=off`, `--proxy-headers` as docs/operations.md advises behind a proxy of
one's own, the default `TRUSTED_PROXIES`, 127.0.0.1), a peer on 127.0.0.1 is the trusted proxy: the client is
the rightmost entry it appended, not what the client wrote to its left, and an entry written anew (with the
client's port, another address of one IPv6 /64, IPv4 as IPv4-mapped IPv6) is the same client
(streams/server/addresses.py); a peer on 127.0.0.2 is untrusted. A client's `Daphne-Root-Path` never reaches the
admin's redirect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User

from bindings.services import do_put_endpoint, do_put_route
from tests.conftest import unique
from tests.e2e.test_http2 import Web, web_with_https
from tests.support.servers import stop_web, web_started

pytestmark = pytest.mark.django_db(transaction=True)
UNTRUSTED_PEER = "127.0.0.2"


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: object) -> Iterator[Web]:
    with web_with_https() as serving:
        yield serving


@pytest.fixture(scope="module")
def proxied(django_db_setup: None, django_db_blocker: object) -> Iterator[int]:
    """platform/web.py without its edge, as behind a proxy of the operator's own: the workers' port."""
    process, port = web_started(1, WEB_EDGE="off", WEB_TLS_PORT="off", WEB_DAPHNE_ARGS="--proxy-headers")
    try:
        yield port
    finally:
        stop_web(process)


def route_of_one_stream_per_client(topic: str) -> str:
    name = unique("fwd")
    do_put_endpoint(name=name, max_streams_per_client=1)
    do_put_route(name=name, path=f"/{name}", topic=topic, endpoint=name)
    return f"/{name}"


def open_stream(
    streams: ExitStack, url: str, forwarded_for: str, *, local_address: str | None = None, http2: bool = False
) -> httpx.Response:
    """GET a stream with `X-Forwarded-For`, left open until `streams` closes; the response (headers read)."""
    transport = httpx.HTTPTransport(local_address=local_address, verify=False, http2=http2)
    client = streams.enter_context(httpx.Client(transport=transport, timeout=10))
    request = client.build_request("GET", url, headers={"x-forwarded-for": forwarded_for})
    response = client.send(request, stream=True)
    streams.callback(response.close)
    return response


@pytest.mark.parametrize("through", ["edge", "proxied"])
def test_an_untrusted_peer_is_counted_by_its_own_address_whatever_it_forwards(
    request: pytest.FixtureRequest, new_topic: Callable[..., str], through: str
) -> None:
    port = request.getfixturevalue("web").port if through == "edge" else request.getfixturevalue("proxied")
    url = f"http://127.0.0.1:{port}" + route_of_one_stream_per_client(new_topic())
    with ExitStack() as streams:
        first = open_stream(streams, url, "198.51.100.1", local_address=UNTRUSTED_PEER)
        assert first.status_code == 200
        second = open_stream(streams, url, "198.51.100.2", local_address=UNTRUSTED_PEER)
        assert second.status_code == 429, "a rotated X-Forwarded-For from an untrusted peer made a new client"
        second.read()
        assert second.json()["title"] == "Too many streams"


def test_through_the_edge_a_client_is_its_own_address_whatever_it_forwards(
    web: Web, new_topic: Callable[..., str]
) -> None:
    url = f"http://127.0.0.1:{web.port}" + route_of_one_stream_per_client(new_topic())
    with ExitStack() as streams:
        assert open_stream(streams, url, "198.51.100.1").status_code == 200
        # what would be another client behind a proxy is the same client here: the edge took no header's word
        assert open_stream(streams, url, "198.51.100.2").status_code == 429
        assert open_stream(streams, url, "198.51.100.3", local_address=UNTRUSTED_PEER).status_code == 200


def test_from_the_trusted_proxy_the_client_is_the_entry_it_appended(
    proxied: int, new_topic: Callable[..., str]
) -> None:
    url = f"http://127.0.0.1:{proxied}" + route_of_one_stream_per_client(new_topic())
    with ExitStack() as streams:
        assert open_stream(streams, url, "198.51.100.1").status_code == 200
        # another client behind the proxy: a stream of its own
        assert open_stream(streams, url, "198.51.100.2").status_code == 200
        # the first client again, having written an address of its choosing to the left of the proxy's entry
        spoofed = open_stream(streams, url, "203.0.113.9, 198.51.100.1")
        assert spoofed.status_code == 429, "the client's own X-Forwarded-For entry was taken for its address"


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ("198.51.100.1:4711", "198.51.100.1:4712"),  # the client's port, a new one per connection
        ("[2001:db8:1:2::1]:4711", "[2001:db8:1:2::2]:4712"),  # and another address of the same /64
        ("198.51.100.1", "::ffff:198.51.100.1"),  # IPv4, and the same written as IPv4-mapped IPv6
    ],
    ids=["ipv4-port", "ipv6-prefix-port", "ipv4-mapped"],
)
def test_from_the_trusted_proxy_a_client_written_anew_is_one_client(
    proxied: int, new_topic: Callable[..., str], first: str, again: str
) -> None:
    url = f"http://127.0.0.1:{proxied}" + route_of_one_stream_per_client(new_topic())
    with ExitStack() as streams:
        assert open_stream(streams, url, first).status_code == 200
        second = open_stream(streams, url, again)
        assert second.status_code == 429, f"{again!r} was counted apart from {first!r}"
        assert open_stream(streams, url, "198.51.100.99:4711").status_code == 200  # another client is another


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
def test_on_the_tls_port_forwarded_headers_are_not_read(web: Web, new_topic: Callable[..., str], http2: bool) -> None:
    url = web.https + route_of_one_stream_per_client(new_topic())
    with ExitStack() as streams:
        first = open_stream(streams, url, "198.51.100.1", http2=http2)
        assert (first.status_code, first.http_version) == (200, "HTTP/2" if http2 else "HTTP/1.1")
        assert open_stream(streams, url, "198.51.100.2", http2=http2).status_code == 429


@pytest.mark.parametrize("through", ["edge", "proxied"])
@pytest.mark.parametrize("peer", [UNTRUSTED_PEER, "127.0.0.1"])
def test_a_clients_root_path_header_does_not_reach_the_admins_redirect(
    request: pytest.FixtureRequest, peer: str, through: str
) -> None:
    port = request.getfixturevalue("web").port if through == "edge" else request.getfixturevalue("proxied")
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=10) as client:
        response = client.get(f"http://127.0.0.1:{port}/admin/", headers={"daphne-root-path": "/elsewhere"})
    assert response.status_code == 302
    assert response.headers["location"].startswith("/admin/login/"), response.headers["location"]


def test_the_sign_in_lockout_counts_an_untrusted_peer_by_its_own_address(web: Web) -> None:
    username = unique("operator")
    User.objects.create_superuser(username, "op@example.com", "a-long-operator-password")
    transport = httpx.HTTPTransport(local_address=UNTRUSTED_PEER)
    login = f"http://127.0.0.1:{web.port}/admin/login/"
    statuses = []
    with httpx.Client(transport=transport, timeout=10) as client:
        for attempt in range(settings.AXES_FAILURE_LIMIT):
            form = client.get(login)
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
            assert token is not None, form.text[:500]
            fields = {"csrfmiddlewaretoken": token.group(1), "username": username, "password": "not-the-password"}
            statuses.append(client.post(login, data=fields, headers={"x-forwarded-for": f"198.51.100.{attempt}"}))
    assert [answer.status_code for answer in statuses] == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    [attempt] = AccessAttempt.objects.filter(username=username)
    assert attempt.ip_address == UNTRUSTED_PEER


def test_the_sign_in_lockout_counts_a_clients_ipv6_prefix_from_the_trusted_proxy(proxied: int) -> None:
    username = unique("operator")
    User.objects.create_superuser(username, "op@example.com", "a-long-operator-password")
    login = f"http://127.0.0.1:{proxied}/admin/login/"
    statuses = []
    with httpx.Client(timeout=10) as client:
        for attempt in range(settings.AXES_FAILURE_LIMIT):
            form = client.get(login)
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
            assert token is not None, form.text[:500]
            fields = {"csrfmiddlewaretoken": token.group(1), "username": username, "password": "not-the-password"}
            forwarded = {"x-forwarded-for": f"[2001:db8:1:2::{attempt + 1}]:{4700 + attempt}"}
            statuses.append(client.post(login, data=fields, headers=forwarded))
    assert [answer.status_code for answer in statuses] == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    [attempt] = AccessAttempt.objects.filter(username=username)
    assert attempt.ip_address == "2001:db8:1:2::"
