"""Client addresses as the per-address limits count them: one key per client, however its address is written.

Every per-address count of the workers keys on `client_key(address)` and on nothing else: streams per client and
the challenge rate (streams/edge/limits.py, streams/edge/side_requests.py), and the admin's sign-in lockout
(`lockout_address`, django-axes' `AXES_CLIENT_IP_CALLABLE`); the edge keys its connection cap the same way
(platform/edge/haproxy.cfg). Keyed on the address as written, a client got a fresh count by writing it anew:

- an IPv6 client holds a whole prefix (a /64 at least, often a /56 or a /48) and may use a new address for every
  connection: an IPv6 address counts as its `SSE_CLIENT_IPV6_PREFIX` (default /64), keyed by the prefix's first
  address (`2001:db8:1:2::` for any address of 2001:db8:1:2::/64), a valid address wherever one is stored;
- a dual-stack socket reports an IPv4 peer as `::ffff:192.0.2.7`: an IPv4-mapped address counts as its IPv4;
- a proxy may write its entries with the client's port (`192.0.2.7:4711`, `[2001:db8::1]:4711`, quoted as
  RFC 7239's `for="[2001:db8::1]:4711"`), a new port per connection: ports, brackets and quotes are stripped
  (`host_of`, which streams/server/forwarded.py also reads forwarded entries with).

What is not an address (`unknown`, a proxy's obfuscated `_hidden`, anything longer than `ADDRESS_CHARS`) is its own
key, as written. The functions are pure; what they read is cached (a connection and a stream's open ask once, a
proxy's request once per forwarded entry), up to `CACHED` entries of `ADDRESS_CHARS` at most.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
CACHED = 4096  # addresses whose parse and key are remembered (least recently used forgotten first)
# The longest entry read as an address: `"[` IPv6 (45 characters with an IPv4 tail) `%zone]:65535"`. A longer one,
# which a client may write into a forwarded header, is no address, and never cached.
ADDRESS_CHARS = 72


def parse_address(entry: str) -> IPAddress | None:
    """The address in `entry` (a peer's host or a forwarded entry), IPv4-mapped IPv6 as IPv4; None if none."""
    return None if len(entry) > ADDRESS_CHARS else _parse(entry)


@functools.lru_cache(maxsize=CACHED)
def _parse(entry: str) -> IPAddress | None:
    text = entry.strip().strip('"').strip()
    if text.startswith("["):  # `[v6]` or `[v6]:port`
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # `v4:port` (an IPv6 address has two colons at least)
        text = text.partition(":")[0]
    text = text.partition("%")[0]  # an IPv6 zone (`fe80::1%eth0`) names the server's interface, not the client
    try:
        address: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def host_of(entry: str) -> str:
    """`entry`'s address written canonically (no port, no brackets, IPv4-mapped as IPv4), or `entry` stripped when
    it is no address."""
    address = parse_address(entry)
    return entry.strip() if address is None else str(address)


def client_key(address: str) -> str:
    """The key every per-address limit counts `address` under (the module's docstring says which)."""
    # Asked at every connection and every stream's open: the setting (a lookup through Django's lazy settings, as
    # long as the rest) is read only for IPv6 addresses, whose key it changes.
    if len(address) > ADDRESS_CHARS:
        return address.strip()
    key = _settled_key(address)
    return _ipv6_key(address, settings.SSE_CLIENT_IPV6_PREFIX) if key is None else key


@functools.lru_cache(maxsize=CACHED)
def _settled_key(entry: str) -> str | None:
    """The key of an entry that is no IPv6 address (an IPv4 one, or no address); None for IPv6."""
    address = parse_address(entry)
    if address is None:
        return entry.strip()
    return None if isinstance(address, ipaddress.IPv6Address) else str(address)


@functools.lru_cache(maxsize=CACHED)
def _ipv6_key(entry: str, prefix: int) -> str:
    address = parse_address(entry)
    return str(ipaddress.IPv6Network((address, prefix), strict=False).network_address)


def lockout_address(request: Any) -> str | None:
    """django-axes' `AXES_CLIENT_IP_CALLABLE`: the sign-in lockout counts a client as the other limits do."""
    address = request.META.get("REMOTE_ADDR")
    return client_key(address) if address else None
