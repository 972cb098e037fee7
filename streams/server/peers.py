"""Connections per client address: one web process holds at most `SSE_MAX_CONNECTIONS_PER_CLIENT` from one address.

HTTP/2 lets a client open up to 100 streams on each connection, so a limit on streams per address means little
unless connections are limited too; over HTTP/1.1 each connection holds one stream. The address is the socket's
peer (a proxy in front is one address: raise the limit, or set 0, for it), counted as `client_key` gives it
(streams/server/addresses.py): an IPv6 peer by its prefix, an IPv4-mapped one as IPv4. A connection past the
limit is closed as soon as it is accepted, before a byte is read (Twisted closes the socket when the factory builds
no protocol).

`PeerConnections.limit(port)` puts the count in front of a listening port's factory; every port of the process
shares one count (the plain port and the TLS one).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from streams.server.addresses import client_key

log = logging.getLogger(__name__)


class PeerStats:
    """Connections refused in this process for their address's limit (`/-/health`)."""

    refused = 0


class PeerConnections:
    """How many connections each client address holds open in this process, and the refusals past `maximum`."""

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum  # 0: no limit
        self.open: Counter[str] = Counter()

    def limit(self, port: Any) -> None:
        """Count the connections `port` accepts from now on, and refuse those past the limit."""
        port.factory = CountedFactory(port.factory, self)

    def admit(self, host: str) -> bool:
        """Count a connection from `host` (a key from `client_key`), or refuse it past the limit."""
        if self.maximum and self.open[host] >= self.maximum:
            PeerStats.refused += 1
            if PeerStats.refused == 1 or PeerStats.refused % 1000 == 0:  # a flood is not logged line by line
                log.warning(
                    "refused a connection from %s, which holds %d (SSE_MAX_CONNECTIONS_PER_CLIENT); %d refused so far",
                    host,
                    self.open[host],
                    PeerStats.refused,
                )
            return False
        self.open[host] += 1
        return True

    def release(self, host: str) -> None:
        self.open[host] -= 1
        if self.open[host] <= 0:
            del self.open[host]


class CountedFactory:
    """A listening port's factory, as the port sees it: the same factory (every attribute is the wrapped one's),
    but `buildProtocol` counts the connection against its address, or builds nothing past the limit."""

    def __init__(self, factory: Any, peers: PeerConnections) -> None:
        self.wrapped, self.peers = factory, peers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def buildProtocol(self, addr: Any) -> Any:
        host = client_key(str(getattr(addr, "host", "")))
        if not self.peers.admit(host):
            return None
        try:
            protocol = self.wrapped.buildProtocol(addr)
        except BaseException:
            self.peers.release(host)
            raise
        if protocol is None:
            self.peers.release(host)
        else:
            self._release_on_close(protocol, host)
        return protocol

    def _release_on_close(self, protocol: Any, host: str) -> None:
        lost = protocol.connectionLost
        own = "connectionLost" in vars(protocol)

        def connection_lost(reason: Any) -> None:
            # Released once, whoever calls it again. The class's method comes back by deleting this one: stored
            # on the instance, a bound method would hold its protocol in a cycle only the collector frees.
            if own:
                protocol.connectionLost = lost
            else:
                del protocol.connectionLost
            self.peers.release(host)
            lost(reason)

        protocol.connectionLost = connection_lost
