"""Which client a request comes from: the peer, or what the edge (or a trusted proxy) says in forwarded headers.

daphne's `--proxy-headers` takes `X-Forwarded-For` (its first entry), `X-Forwarded-Port` and `X-Forwarded-Proto`
from whoever sends them, and `Daphne-Root-Path` from any request. The per-address stream limit, the challenge
rate and the admin's sign-in lockout all key on the client address, so a client that writes its own
`X-Forwarded-For` would pick the address they count. `ClientOrigin.rewrite` runs on each request's scope before
the application sees it and undoes what daphne took, unless the request came through the edge or a trusted proxy:

- the edge (platform/edge/haproxy.cfg) says who it is with a token on every request it hands on (`EDGE_HEADER`,
  made anew by platform/web.py at each start and known to the edge and the workers only): such a request's
  headers are believed, whatever its peer. The edge drops whatever a client wrote in these headers and writes the
  client's address, port and scheme itself. The token never reaches the application;
- over TCP, only a peer inside `TRUSTED_PROXIES` (addresses or networks) is believed (an operator's own proxy in
  place of the edge, docs/operations.md), and never over TLS, which clients reach directly;
- from a trusted peer, the client is the rightmost `X-Forwarded-For` entry that is not itself a trusted proxy:
  each proxy appends the address it saw, so entries to the left of that one are the client's own writing. An
  entry is read as `host_of` reads it (streams/server/addresses.py): a port a proxy wrote beside the address
  (`192.0.2.7:4711`, `[2001:db8::1]:4711`) is not part of it, nor of the client's address in the scope;
- from anyone else the forwarded headers are dropped from the scope, so nothing downstream (Django's
  `SECURE_PROXY_SSL_HEADER`, a log) reads them either;
- `Daphne-Root-Path` is never honoured: the root path is the server's `--root-path`.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import Any

from streams.server.addresses import host_of, parse_address

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
EDGE_HEADER = b"x-sse-edge"
FORWARDED_HEADERS = frozenset(
    {b"x-forwarded-for", b"x-forwarded-port", b"x-forwarded-proto", b"x-forwarded-host", b"x-real-ip", b"forwarded"}
)
SCHEMES = ("http", "https")
LAST_PORT = 65535
TRUST_CACHE_SIZE = 4096  # addresses whose trust is remembered; all forgotten when full


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """`127.0.0.1`, `10.0.0.0/8`, `::1` as networks; ValueError names an entry that is neither."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or network") from None
    return tuple(networks)


class ClientOrigin:
    """Set a request scope's `client`, `scheme` and `root_path` from the connection, or from a trusted proxy.

    `address_header` and the others are the header names daphne was told to read (`--proxy-headers`,
    `--proxy-headers-host`, `--proxy-headers-port`), None when it reads none; `edge_token` is the edge's token
    (empty: no edge, no request is taken for its).
    """

    def __init__(
        self,
        trusted: Iterable[IPNetwork],
        *,
        root_path: str,
        address_header: str | None,
        port_header: str | None = None,
        proto_header: str | None = None,
        edge_token: str = "",
    ) -> None:
        self.trusted = tuple(trusted)
        self.edge_token = edge_token.encode("latin-1")
        self._trusted: dict[str, bool] = {}  # by address as written, up to TRUST_CACHE_SIZE of them
        self.root_path = root_path
        self.address_header = self._name(address_header)
        self.port_header = self._name(port_header)
        self.proto_header = self._name(proto_header)
        self.dropped = FORWARDED_HEADERS | {name for name in (self.address_header, self.port_header) if name}

    @staticmethod
    def _name(header: str | None) -> bytes | None:
        return header.lower().encode("latin-1") if header else None

    def is_trusted(self, host: str) -> bool:
        # Asked for every request's peer: parsing the address each time was 6 µs of a stream's open.
        trusted = self._trusted.get(host)
        if trusted is None:
            if len(self._trusted) >= TRUST_CACHE_SIZE:
                self._trusted.clear()
            address = parse_address(host)  # a dual-stack socket's `::ffff:127.0.0.1` is 127.0.0.1
            trusted = address is not None and any(address in network for network in self.trusted)
            self._trusted[host] = trusted
        return trusted

    def rewrite(self, scope: dict[str, Any], peer: tuple[str, int] | None, *, secure: bool) -> None:
        """Correct `scope` (daphne's, for a request from `peer` over TLS or not) before the application sees it."""
        scope["root_path"] = self.root_path
        connection_scheme = "https" if secure else "http"
        trusted = self.from_edge(scope) or (peer is not None and not secure and self.is_trusted(peer[0]))
        if not trusted:
            scope["client"] = list(peer) if peer is not None else None
            scope["scheme"] = connection_scheme
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name not in self.dropped]
            return
        if self.address_header is None:
            return  # daphne took nothing from the headers; Django may still read them, as they come from a proxy
        headers = scope["headers"]
        host = self.client_host(headers)
        if host is None:
            scope["client"] = list(peer) if peer is not None else None
            scope["scheme"] = connection_scheme
            return
        scope["client"] = [host, self.forwarded_port(headers)]
        scope["scheme"] = self.forwarded_scheme(headers, connection_scheme)

    def from_edge(self, scope: dict[str, Any]) -> bool:
        """Whether the request carries the edge's token; the token leaves the scope either way."""
        headers = scope["headers"]
        said = [value for name, value in headers if name == EDGE_HEADER]
        if not said:
            return False
        scope["headers"] = [(name, value) for name, value in headers if name != EDGE_HEADER]
        return bool(self.edge_token) and len(said) == 1 and hmac.compare_digest(said[0], self.edge_token)

    def client_host(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The address of the rightmost forwarded entry that is not a trusted proxy (the leftmost if all are), without
        a port; None if there is no entry."""
        chain = [
            host_of(entry)
            for name, value in headers
            if name == self.address_header
            for entry in value.decode("latin-1").split(",")
            if entry.strip()
        ]
        if not chain:
            return None
        for entry in reversed(chain):
            if not self.is_trusted(entry):
                return entry
        return chain[0]

    def forwarded_port(self, headers: list[tuple[bytes, bytes]]) -> int:
        for name, value in headers:
            if name == self.port_header and value.strip().isdigit() and int(value.strip()) <= LAST_PORT:
                return int(value.strip())
        return 0

    def forwarded_scheme(self, headers: list[tuple[bytes, bytes]], default: str) -> str:
        for name, value in headers:
            if name == self.proto_header:
                scheme = value.decode("latin-1").split(",")[0].strip().lower()
                return scheme if scheme in SCHEMES else default
        return default
