"""A process's revocations, in the test process: a revoked identity's (or token's) challenge response extends
none of its streams, and a revocation past its `until` refuses nothing without being read again."""

from __future__ import annotations

import json
import time

import pytest

from bindings.selectors import GuardSpec, RouteSpec
from streams.access.guards import Grant
from streams.access.renewal import Renewals
from streams.access.revocations import Revocations
from streams.telemetry.delivery_schema import End
from tests.support.jwt_keys import AUDIENCE, ISSUER, public_jwk, token

GUARD = GuardSpec(name="jwt", issuer=ISSUER, audience=AUDIENCE, keys=json.dumps([public_jwk()]), challenge_s=30)
ROUTE = RouteSpec(name="items", paths=("/items",), topic="items", guarded=((GUARD, ("read",)),))


class Held:
    """A guarded stream as a process holds it: its route and tokens, what renewed or ended it."""

    def __init__(self, identity: str, expires_at: float) -> None:
        self.route: RouteSpec | None = ROUTE
        self.grants = {"jwt": Grant(identity=identity, roles=frozenset({"read"}), expires_at=expires_at)}
        self.renewals = 0
        self.ended: list[End] = []

    def reauthorised(self) -> None:
        self.renewals += 1

    def end(self, reason: End) -> None:
        self.ended.append(reason)


def held(renewals: Renewals, identity: str) -> Held:
    stream = Held(identity, expires_at=time.time() + 20)
    renewals.streams.add(stream)  # as Renewals.add does, without its listener
    return stream


@pytest.mark.asyncio
@pytest.mark.timeout(10)
async def test_a_revoked_identity_or_token_renews_nothing() -> None:
    renewals = Renewals()
    revocations = Revocations(renewals)
    renewals.is_revoked = revocations.covers
    alice, bob, carol = held(renewals, "alice"), held(renewals, "bob"), held(renewals, "carol")
    revocations.identities[("jwt", "alice")] = time.time() + 60
    revocations.tokens[("jwt", "leaked")] = time.time() + 60

    for renewal in (token("alice"), token("bob"), token("carol", jti="leaked"), token("carol", jti="fresh")):
        await renewals.reauthorize(renewal)

    assert alice.renewals == 0, "a revoked identity renewed its stream"
    assert alice.grants["jwt"].expires_at is not None
    assert alice.grants["jwt"].expires_at < time.time() + 60
    assert bob.renewals == 1
    assert bob.grants["jwt"].expires_at is not None
    assert bob.grants["jwt"].expires_at > time.time() + 3000
    assert carol.renewals == 1, "the revoked token renewed nothing; the fresh one renewed"
    assert carol.grants["jwt"].token_id == "fresh"

    revocations.sweep()  # as after a read of the revocations: the revoked identity's stream ends, once
    revocations.sweep()
    assert (alice.ended, bob.ended, carol.ended) == ([End.REVOKED], [], [])
    assert revocations.closed == 1


def test_a_revocation_lapses_at_its_until_without_a_reload() -> None:
    revocations = Revocations(Renewals())
    grant = Grant(identity="alice", roles=frozenset(), token_id="t-1")
    revocations.identities[("jwt", "alice")] = time.time() + 60
    assert revocations.covers("jwt", grant)
    assert not revocations.covers("other-guard", grant), "a revocation is of one guard's tokens"
    revocations.identities[("jwt", "alice")] = time.time() - 0.001
    assert not revocations.covers("jwt", grant)
    revocations.tokens[("jwt", "t-1")] = time.time() + 60
    assert revocations.revoked({"jwt": grant})
    assert not revocations.revoked({"jwt": Grant(identity="alice", roles=frozenset(), token_id="t-2")})
