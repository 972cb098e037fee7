"""A guarded stream's token lease (streams/access/lease.py): it ends the stream when the first token expires,
challenges the client the guard's `challenge` seconds before, and goes on when a token was renewed meanwhile."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from streams.access.guards import Grant
from streams.access.lease import Lease
from streams.telemetry.delivery_schema import End


def route(challenge_s: int = 0) -> SimpleNamespace:
    return SimpleNamespace(guarded=[(SimpleNamespace(name="jwt", challenge_s=challenge_s), None)])


def token(expires_in: float | None, identity: str | None = "alice") -> Grant:
    expires_at = None if expires_in is None else time.time() + expires_in
    return Grant(identity=identity, roles=frozenset(), expires_at=expires_at)


def lease(route: SimpleNamespace, grants: dict[str, Grant]) -> tuple[Lease, list[str], list[End]]:
    challenges: list[str] = []
    ends: list[End] = []
    found = Lease(route, grants, challenge=lambda: challenges.append("challenge"), end=ends.append)  # type: ignore[arg-type]
    return found, challenges, ends


def test_the_lease_runs_until_the_first_token_expires() -> None:
    first, later = token(10), token(20)
    found, _, _ = lease(route(), {"jwt": first, "other": later})
    assert found.expires_at == first.expires_at
    assert lease(route(), {"jwt": token(None)})[0].expires_at is None


@pytest.mark.asyncio
async def test_the_stream_ends_when_its_token_expires() -> None:
    found, challenges, ends = lease(route(), {"jwt": token(0.05)})
    found.schedule()
    await asyncio.sleep(0.2)
    assert (challenges, ends) == ([], [End.TOKEN_EXPIRED])


@pytest.mark.asyncio
async def test_the_client_is_challenged_before_expiry_and_a_renewed_token_goes_on() -> None:
    grants = {"jwt": token(10.05)}
    found, challenges, ends = lease(route(challenge_s=10), grants)
    found.schedule()
    await asyncio.sleep(0.2)
    assert (challenges, ends) == (["challenge"], [])

    grants["jwt"] = token(60)  # the challenge response renews the token in place
    found.expire()  # an expiry timer that fires after the renewal re-arms instead of ending
    assert ends == []
    assert found.timer is not None
    found.cancel()


def test_a_token_without_an_identity_is_never_challenged() -> None:
    found, _, _ = lease(route(challenge_s=10), {"jwt": token(30, identity=None)})
    assert found.challenge_at(time.time() + 30) is None
