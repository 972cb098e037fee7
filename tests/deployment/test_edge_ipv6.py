"""The edge's connection cap counts an IPv6 client by its prefix (SSE_CLIENT_IPV6_PREFIX, a /64 by default): a
client holds a whole prefix and may take a new address for every connection, so a cap per address would not bound
it. Run in a network namespace of its own, where loopback holds a whole prefix (tests/support/edge_netns.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAP = 3


def namespaces_available() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-n", "true"], check=False).returncode == 0


def edge_in_namespace(prefix: int, sources: list[str]) -> dict[str, object]:
    # The suite's hosts (this machine, CI) let a process make one: a host that does not fails here, loudly.
    assert namespaces_available(), "unshare -n failed: this test needs a network namespace (CAP_SYS_ADMIN)"
    env = os.environ | {"SSE_MAX_CONNECTIONS_PER_CLIENT": str(CAP), "SSE_CLIENT_IPV6_PREFIX": str(prefix)}
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.support.edge_netns", *sources],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_new_addresses_of_a_full_64_are_refused_and_other_prefixes_are_not() -> None:
    # CAP connections are held from fd00:5e:0:1::1, ::2, ::3.
    result = edge_in_namespace(64, ["fd00:5e:0:1::99", "fd00:5e:0:1:ffff:ffff:ffff:fffe", "fd00:5e:0:2::1"])
    assert result["answered"] == {
        "fd00:5e:0:1::99": False,  # a new address of the same /64
        "fd00:5e:0:1:ffff:ffff:ffff:fffe": False,  # its far end
        "fd00:5e:0:2::1": True,  # the next /64
    }
    assert result["after_one_closed"] is True  # a connection closed makes room for one more of that /64


def test_a_shorter_prefix_counts_neighbouring_64s_as_one_client() -> None:
    result = edge_in_namespace(56, ["fd00:5e:0:2::1", "fd00:5e:0:ff::1", "fd00:5e:0:100::1"])
    assert result["answered"] == {
        "fd00:5e:0:2::1": False,  # another /64 of the same /56
        "fd00:5e:0:ff::1": False,  # the last /64 of that /56
        "fd00:5e:0:100::1": True,  # the next /56
    }
    assert result["after_one_closed"] is True
