"""`client_key` (streams/server/addresses.py): one key per client however its address is written, and the limit
that counts by it in the workers: streams per address (streams/edge/limits.py). Connections per address are the
edge's (tests/e2e/test_client_bounds.py); the live server's side is tests/e2e/test_forwarded_headers.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from bindings.selectors import EndpointSpec
from streams.edge.limits import LimitReached, StreamLimits
from streams.server.addresses import client_key, host_of, lockout_address


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        (" 192.0.2.7 ", "192.0.2.7"),
        ("192.0.2.7:4711", "192.0.2.7"),  # a proxy's entry with the client's port
        ("::ffff:192.0.2.7", "192.0.2.7"),  # a dual-stack socket's IPv4 peer
        ("[::ffff:192.0.2.7]:4711", "192.0.2.7"),
        ("2001:db8:1:2::1", "2001:db8:1:2::"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"),  # the same /64
        ("2001:DB8:1:2:0:0:0:9", "2001:db8:1:2::"),  # written otherwise
        ("[2001:db8:1:2::1]:4711", "2001:db8:1:2::"),
        ('"[2001:db8:1:2::1]:4711"', "2001:db8:1:2::"),  # as RFC 7239's `for=` quotes it
        ("fe80::1%eth0", "fe80::"),
        ("2001:db8:1:3::1", "2001:db8:1:3::"),  # the next /64: another client
        ("unknown", "unknown"),  # no address: its own key, as written
        ("", ""),
        ("1" * 100, "1" * 100),
    ],
)
def test_it_keys_an_address_however_it_is_written(written: str, key: str) -> None:
    assert client_key(written) == key


@override_settings(SSE_CLIENT_IPV6_PREFIX=48)
def test_it_keys_ipv6_by_the_configured_prefix() -> None:
    assert client_key("2001:db8:1:2::1") == client_key("2001:db8:1:ffff::1") == "2001:db8:1::"
    with override_settings(SSE_CLIENT_IPV6_PREFIX=128):
        assert client_key("2001:db8:1:2::1") != client_key("2001:db8:1:2::2")


def test_the_address_of_an_entry_keeps_its_ipv6_address_whole() -> None:
    assert host_of("[2001:db8:1:2::1]:4711") == "2001:db8:1:2::1"
    assert host_of("198.51.100.1:4711") == "198.51.100.1"
    assert host_of("::ffff:198.51.100.1") == "198.51.100.1"
    assert host_of(" not-an-address ") == "not-an-address"
    assert host_of(f"[2001:db8:1:2::1%{'x' * 100}]:4711") == f"[2001:db8:1:2::1%{'x' * 100}]:4711"  # too long


def test_the_sign_in_lockout_counts_an_address_as_the_limits_do() -> None:
    class Request:
        def __init__(self, **meta: str) -> None:
            self.META = meta

    assert lockout_address(Request(REMOTE_ADDR="2001:db8:1:2::77")) == "2001:db8:1:2::"
    assert lockout_address(Request()) is None


@override_settings(SSE_MAX_STREAMS=0, SSE_MAX_STREAMS_PER_CLIENT=2)
def test_streams_from_one_ipv6_prefix_share_one_count() -> None:
    limits = StreamLimits()
    endpoint = EndpointSpec(name="e")
    admitted: list[Any] = [limits.admit(endpoint, f"2001:db8:1:2::{n}", None) for n in (1, 2, 3)]
    assert [isinstance(ticket, LimitReached) for ticket in admitted] == [False, False, True]
    assert not isinstance(limits.admit(endpoint, "2001:db8:1:3::1", None), LimitReached)
    limits.release(admitted[0])
    assert not isinstance(limits.admit(endpoint, "[2001:db8:1:2::9]:4711", None), LimitReached)
