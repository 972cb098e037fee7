"""`ClientOrigin` (streams/server/forwarded.py) on scopes as daphne builds them: which client, which scheme, and
which headers the application gets. The live server's side is tests/e2e/test_forwarded_headers.py."""

from __future__ import annotations

from typing import Any

import pytest

from streams.server import forwarded
from streams.server.forwarded import ClientOrigin, parse_networks

PROXY = ("10.0.0.5", 41000)
ORIGIN = ClientOrigin(
    parse_networks(["10.0.0.0/24", "::1"]),
    root_path="",
    address_header="X-Forwarded-For",
    port_header="X-Forwarded-Port",
    proto_header="X-Forwarded-Proto",
)


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    """A scope daphne made with --proxy-headers: it believed the first X-Forwarded-For entry and Daphne-Root-Path."""
    return {"client": ["6.6.6.6", 0], "scheme": "https", "root_path": "/evil", "headers": list(headers)}


def test_from_an_untrusted_peer_the_peer_is_the_client_and_forwarded_headers_are_dropped() -> None:
    given = scope((b"x-forwarded-for", b"6.6.6.6"), (b"x-real-ip", b"6.6.6.6"), (b"forwarded", b"for=6.6.6.6"),
                  (b"x-forwarded-proto", b"https"), (b"accept", b"text/event-stream"))  # fmt: skip
    ORIGIN.rewrite(given, ("192.0.2.7", 50000), secure=False)
    assert given == {"client": ["192.0.2.7", 50000], "scheme": "http", "root_path": "", "headers": [
        (b"accept", b"text/event-stream")
    ]}  # fmt: skip


def test_over_tls_even_a_trusted_peer_is_not_believed() -> None:
    given = scope((b"x-forwarded-for", b"198.51.100.1"))
    ORIGIN.rewrite(given, PROXY, secure=True)
    assert (given["client"], given["scheme"], given["headers"]) == (list(PROXY), "https", [])


@pytest.mark.parametrize(
    ("forwarded_for", "client"),
    [
        ([b"198.51.100.1"], "198.51.100.1"),
        ([b"6.6.6.6, 198.51.100.1"], "198.51.100.1"),  # the client wrote the left entry
        ([b"6.6.6.6", b"198.51.100.1, 10.0.0.9"], "198.51.100.1"),  # two headers, and a second trusted proxy
        ([b"10.0.0.8, 10.0.0.9"], "10.0.0.8"),  # every hop trusted: the first one
        ([b"not-an-address"], "not-an-address"),
        # a proxy that writes the port it saw: the address is the client, and a trusted hop is still one
        ([b"198.51.100.1:4711"], "198.51.100.1"),
        ([b"[2001:db8::1]:4711"], "2001:db8::1"),
        ([b"6.6.6.6, 198.51.100.1:4711, 10.0.0.9:443"], "198.51.100.1"),
        ([b"::ffff:198.51.100.1"], "198.51.100.1"),
    ],
)
def test_from_a_trusted_proxy_the_client_is_the_rightmost_untrusted_entry(
    forwarded_for: list[bytes], client: str
) -> None:
    given = scope(*((b"x-forwarded-for", value) for value in forwarded_for), (b"x-forwarded-port", b"443"))
    ORIGIN.rewrite(given, PROXY, secure=False)
    assert given["client"] == [client, 443]
    assert given["root_path"] == ""


@pytest.mark.parametrize(("proto", "scheme"), [(b"https", "https"), (b"HTTPS", "https"), (b"gopher", "http")])
def test_a_trusted_proxys_scheme_is_http_or_https(proto: bytes, scheme: str) -> None:
    given = scope((b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-proto", proto), (b"x-forwarded-port", b"x"))
    ORIGIN.rewrite(given, PROXY, secure=False)
    assert (given["client"], given["scheme"]) == (["198.51.100.1", 0], scheme)


def test_a_trusted_proxy_on_a_dual_stack_socket_is_trusted() -> None:
    given = scope((b"x-forwarded-for", b"198.51.100.1"))
    ORIGIN.rewrite(given, ("::ffff:10.0.0.5", 41000), secure=False)
    assert given["client"] == ["198.51.100.1", 0]


def test_a_trusted_proxy_without_forwarded_for_is_the_client_itself() -> None:
    given = scope()
    ORIGIN.rewrite(given, PROXY, secure=False)
    assert (given["client"], given["scheme"]) == (list(PROXY), "http")


def test_a_bad_trusted_proxy_entry_is_named() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300' is not an IP address or network"):
        parse_networks(["10.0.0.300"])


def test_trust_is_remembered_per_address_and_forgotten_past_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarded, "TRUST_CACHE_SIZE", 8)
    origin = ClientOrigin(parse_networks(["10.0.0.0/24"]), root_path="", address_header="X-Forwarded-For")
    addresses = [f"192.0.2.{n}" for n in range(20)] + ["10.0.0.7", "not-an-address"]
    asked = [origin.is_trusted(address) for address in addresses]
    again = [origin.is_trusted(address) for address in reversed(addresses)]

    assert asked == [False] * 20 + [True, False]
    assert again == list(reversed(asked))
    assert len(origin._trusted) <= 8


EDGE_TOKEN = "a-token-the-edge-and-the-workers-share"


def edge_origin(token: str = EDGE_TOKEN) -> ClientOrigin:
    return ClientOrigin((), root_path="", address_header="X-Forwarded-For", port_header="X-Forwarded-Port",
                        proto_header="X-Forwarded-Proto", edge_token=token)  # fmt: skip


def from_edge(token: bytes) -> dict[str, Any]:
    return scope((b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-port", b"8443"),
                 (b"x-forwarded-proto", b"https"), (b"x-sse-edge", token))  # fmt: skip


def test_a_request_with_the_edges_token_is_believed_whoever_its_peer_and_the_token_goes() -> None:
    """The edge hands requests on over a loopback port any local process may reach: its token, not its address,
    says a request is its; no `TRUSTED_PROXIES` need name it."""
    given = from_edge(EDGE_TOKEN.encode())
    edge_origin().rewrite(given, ("127.0.0.1", 40000), secure=False)
    assert (given["client"], given["scheme"], given["root_path"]) == (["198.51.100.1", 8443], "https", "")
    assert b"x-sse-edge" not in dict(given["headers"])  # the application never sees it


@pytest.mark.parametrize(
    ("configured", "said"),
    [(EDGE_TOKEN, b"a-guess"), (EDGE_TOKEN, b""), ("", b"")],
    ids=["wrong-token", "empty-token", "no-edge"],
)
def test_a_request_without_the_edges_token_is_not_believed(configured: str, said: bytes) -> None:
    given = from_edge(said)
    edge_origin(configured).rewrite(given, ("127.0.0.1", 40000), secure=False)
    assert (given["client"], given["scheme"], given["headers"]) == (["127.0.0.1", 40000], "http", [])


def test_a_token_said_twice_is_not_believed() -> None:
    given = from_edge(EDGE_TOKEN.encode())
    given["headers"].append((b"x-sse-edge", EDGE_TOKEN.encode()))
    edge_origin().rewrite(given, ("127.0.0.1", 40000), secure=False)
    assert given["client"] == ["127.0.0.1", 40000]
