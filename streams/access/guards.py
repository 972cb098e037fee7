"""JWT guards on the data plane (docs/contract.md §1, §2): who may open a stream, and what templates learn of them.

A route may name guards with the roles each requires; a request is authorised when every guard verifies its
token and finds every role. Routes are tried in order: the first that matches the path and authorises serves.
When none authorises, the answer is 401 (no token, or one that does not verify) or 403 (a valid token without
the roles). Tokens come from `authorization: Bearer`, else the `access_token` query parameter, else the cookie
the guard names.

Verification follows Zilla's `jwt` guard: the token's `kid` must name a configured key whose `alg` is the
token's; the signature, `exp`/`nbf` (no leeway), `iss` and `aud` are checked (a token without `exp` is refused
unless its guard allows it); the roles are read from a claim path (a list as is, a string split on whitespace),
and a token without that claim authorises no guarded route.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import jwt
from django.conf import settings
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from bindings.expressions import guard_reads
from bindings.patterns import guard_values, inseparable_values
from bindings.selectors import ASYMMETRIC_ALGORITHMS, GuardSpec, RouteSpec
from streams.access.jwks import JwksClient, JwksError
from streams.codecs.asgi import Scope, header
from streams.routes.matching import Match

log = logging.getLogger(__name__)

MISSING = object()


class InvalidToken(Exception):
    """A token this guard does not accept; the message says why (logged, never sent to the client)."""


class KeysUnavailable(Exception):
    """The guard's JWKS URL cannot be read or holds no usable key: our fault, not the token's."""


FAR_FUTURE_S = 2**53  # an exp past it is as good as never (and a float holds it exactly)


@dataclass(frozen=True)
class Grant:
    """What a guard grants on a verified token: who, with which roles (None: the roles claim is missing), until when."""

    identity: str | None
    roles: frozenset[str] | None
    attributes: dict[str, str] = field(default_factory=dict)
    expires_at: float | None = None  # epoch seconds
    token_id: str | None = None  # the `jti` claim, which a revocation may name
    token_hash: str = ""  # a digest of the token itself, kept in memory only

    @property
    def holder(self) -> str:
        """Whom the per-identity limits count this token against, within its guard: its identity, or for a token
        without one the token itself (by its digest), so that each such token is a quota of its own rather than
        no limit at all (docs/operations.md, "Limits")."""
        return f"identity:{self.identity}" if self.identity else f"token:{self.token_hash}"

    def values(self) -> dict[str, str]:
        """The values `${guarded['<guard>'].…}` templates read: only those the token has (a route reading one it
        lacks is refused, never rendered empty)."""
        found = {} if self.identity is None else {"identity": self.identity}
        found.update((f"attributes.{name}", value) for name, value in self.attributes.items())
        return found


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted claim path (e.g. realm_access.roles), or MISSING."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return value


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    try:
        text.encode()
    except UnicodeEncodeError:
        # JSON's `\ud800` escape reads as a lone surrogate, which no UTF-8 write (a filter's key, the delivery
        # log) can take; replacing it could make two identities one.
        raise InvalidToken("a claim holds a lone surrogate") from None
    return text


class Verifier:
    """Verifies tokens for one guard configuration; its keys are parsed once."""

    def __init__(self, spec: GuardSpec) -> None:
        self.spec = spec
        self.keys: dict[str, PyJWK] = {}
        for jwk in json.loads(spec.keys):
            try:
                self.keys[jwk["kid"]] = PyJWK(jwk, algorithm=jwk["alg"])
            except (PyJWTError, KeyError, TypeError, ValueError):
                log.warning("guard %s: a key cannot be used and is skipped (kid %r)", spec.name, jwk.get("kid"))
        self.client = JwksClient(spec.jwks_url) if spec.jwks_url else None

    async def key_for(self, token: str, header: Mapping[str, Any]) -> PyJWK:
        kid, alg = header.get("kid"), header.get("alg")
        if self.client is not None:
            if not isinstance(kid, str):
                raise InvalidToken("no kid")
            try:
                # JWKS fetches block: each guard's run on its client's own thread (streams/access/jwks.py), so a
                # slow identity provider holds up neither the threads that load routes nor another guard. Bounded
                # here too: a name lookup has no timeout, and a request may wait for another's fetch.
                found = await asyncio.wait_for(self.client.key(kid), timeout=2 * settings.SSE_JWKS_TIMEOUT_S)
            except JwksError as exc:
                raise KeysUnavailable(f"guard {self.spec.name}: JWKS: {exc}") from None
            except TimeoutError:
                raise KeysUnavailable(f"guard {self.spec.name}: JWKS: no answer in time") from None
            if found is None:
                raise InvalidToken(f"no key for kid {kid!r} at the JWKS URL")
            key = found
            if key.algorithm_name not in ASYMMETRIC_ALGORITHMS or not getattr(key, "_jwk_data", {}).get("alg"):
                # Zilla matches only keys that state their alg; a secret published in a JWKS would let anyone sign.
                raise InvalidToken(f"the JWKS key {kid!r} is not a public key with an alg")
        else:
            found = self.keys.get(kid) if isinstance(kid, str) else None
            if found is None:
                raise InvalidToken(f"no key with kid {kid!r}")
            key = found
        if key.algorithm_name != alg:
            raise InvalidToken(f"alg {alg!r} is not the key's ({key.algorithm_name})")
        return key

    async def verify(self, token: str) -> Grant:
        try:
            jws_header = jwt.get_unverified_header(token)
        except PyJWTError as exc:
            raise InvalidToken(f"not a JWS: {exc}") from None
        if "crit" in jws_header:
            # RFC 7515 §4.1.11: the signer requires extensions to be understood, and we understand none. PyJWT
            # refuses those it does not know; this also refuses those it does (b64), which we never process.
            raise InvalidToken(f"critical header extensions {jws_header['crit']!r} are not supported")
        key = await self.key_for(token, jws_header)
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                issuer=self.spec.issuer,
                audience=self.spec.audience,
                # As Zilla: exp and nbf, iss and aud; not iat (a provider's clock a little ahead would refuse fresh
                # tokens), nor the types of sub and jti (the identity may come from another claim). Unlike Zilla, exp
                # is required unless the guard allows its absence: such a token would keep its streams open for ever.
                options={
                    "require": ["iss", "aud"] if self.spec.allow_tokens_without_exp else ["iss", "aud", "exp"],
                    "verify_exp": True,
                    "verify_nbf": True,
                    "verify_iat": False,
                    "verify_sub": False,
                    "verify_jti": False,
                },
            )
        except PyJWTError as exc:
            raise InvalidToken(str(exc)) from None
        roles_claim = claim(claims, self.spec.roles_claim)
        roles: frozenset[str] | None
        if roles_claim is MISSING or roles_claim is None:
            roles = None
        elif isinstance(roles_claim, list):
            roles = frozenset(_text(role) for role in roles_claim)
        else:
            roles = frozenset(_text(roles_claim).split())
        identity = claim(claims, self.spec.identity_claim)
        attributes = {}
        for name, path in self.spec.attributes:
            value = claim(claims, path)
            if value is not MISSING and value is not None:
                attributes[name] = _text(value)
        return Grant(
            identity=None if identity is MISSING or identity is None else _text(identity),
            roles=roles,
            attributes=attributes,
            # PyJWT checked int(exp); one past a float's range (10**400) is as good as never.
            expires_at=None if claims.get("exp") is None else float(min(int(claims["exp"]), FAR_FUTURE_S)),
            token_id=None if claims.get("jti") is None else _text(claims["jti"]),
            token_hash=hashlib.sha256(token.encode()).hexdigest(),
        )


class Verifiers:
    """A verifier per guard configuration, kept while in use (a changed guard gets a new one)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.cache: OrderedDict[GuardSpec, Verifier] = OrderedDict()

    def get(self, spec: GuardSpec) -> Verifier:
        found = self.cache.get(spec)
        if found is None:
            found = self.cache[spec] = Verifier(spec)
            while len(self.cache) > self.size:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(spec)
        return found


verifiers = Verifiers()


def credentials(scope: Scope, cookie: str = "") -> str | None:
    """The token of a request: `authorization: Bearer`, else `?access_token=`, else the guard's cookie."""
    authorization = header(scope, b"authorization")
    if authorization is not None:
        scheme, _, value = authorization.decode("latin-1").strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    query: dict[str, list[str]] = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    if query.get("access_token"):
        return query["access_token"][0]
    if cookie:
        raw = header(scope, b"cookie")
        if raw is not None:
            try:
                jar = SimpleCookie(raw.decode("latin-1"))
            except CookieError:
                return None
            morsel = jar.get(cookie)
            if morsel is not None and morsel.value:
                return str(morsel.value)
    return None


STRENGTH = {401: 0, 503: 1, 403: 2}  # which refusal to answer when several routes refused


def route_templates(route: RouteSpec) -> list[str]:
    """The route's templates: its topic, then its filters' keys, header values and value conditions."""
    templates = [route.topic]
    for spec in route.filters:
        templates.extend(t for t in (spec.key, spec.value.equals if spec.value else None) if t)
        templates.extend(value for _, value in spec.headers)
    return templates


def route_guard_values(route: RouteSpec) -> set[tuple[str, str]]:
    """(guard, value) pairs the route's templates and filter expressions read, value being `identity` or
    `attributes.<name>`. An expression that reads `guarded` in a form not named in its text (an index computed at
    run time) reads every value of the route's guards."""
    found = {pair for template in route_templates(route) for pair in guard_values(template)}
    for spec in route.filters:
        if spec.expression:
            reads = guard_reads(spec.expression)
            if reads is None:
                reads = {(guard.name, "identity") for guard, _ in route.guarded}
                reads |= {
                    (guard.name, f"attributes.{name}") for guard, _ in route.guarded for name, _ in guard.attributes
                }
            found |= reads
    return found


def unfit(match: Match, guarded: Mapping[str, Mapping[str, str]]) -> Refusal | None:
    """Why the route's templates cannot be filled for this request (a 403), or None."""
    lacking = lacking_values(match.route, guarded)
    if lacking:
        # A template would render empty and match what it should not: the token lacks what the route reads.
        return Refusal(403, f"The token lacks what this stream reads: {'; '.join(lacking)}.", True)
    for template in route_templates(match.route):
        for expression, value, char in inseparable_values(template, match.params, guarded):
            # These values could render what another token's do (docs/contract.md §1).
            whose = "The token's" if expression.startswith("guarded") else "The path's"
            detail = (
                f"{whose} ${{{expression}}} is {value!r}, which holds {char!r}: the route puts {char!r} next to it "
                "to tell this token's values from other tokens', so it may not hold one."
            )
            return Refusal(403, detail, True)
    return None


def lacking_values(route: RouteSpec, guarded: Mapping[str, Mapping[str, str]]) -> list[str]:
    """What the route's templates read that the tokens lack, each naming its claim; empty if nothing."""
    specs = {guard.name: guard for guard, _ in route.guarded}
    found = []
    for guard, value in sorted(route_guard_values(route)):
        if value in guarded.get(guard, {}):
            continue
        if guard not in specs:  # checked on save; refused all the same
            found.append(f"{guard}.{value} (the route is not guarded by {guard!r})")
        elif value == "identity":
            found.append(f"{guard}.identity (the identity claim {specs[guard].identity_claim!r} is missing)")
        else:
            path = dict(specs[guard].attributes).get(value.removeprefix("attributes."), "")
            found.append(f"{guard}.{value} (the claim {path!r} is missing)")
    return found


@dataclass
class Refusal:
    """Why no route authorised a request: 401 (no or bad token) or 403 (valid, without the roles)."""

    status: int
    detail: str
    token_given: bool
    revoked: bool = False  # a 401 for a token an operator revoked (streams/access/revocations.py)

    @property
    def reason(self) -> str:
        """The refusal's reason, as the delivery log counts it."""
        if self.revoked:
            return "revoked"
        return {401: "unauthorized", 403: "forbidden"}.get(self.status, "keys_unavailable")

    @property
    def strength(self) -> tuple[int, bool]:
        """Which refusal to answer when several routes refused: a 403 over a 401, a revoked 401 over another."""
        return STRENGTH[self.status], self.revoked


@dataclass(frozen=True)
class Authorised:
    match: Match
    grants: dict[str, Grant]


REVOKED_TYPE = "urn:sse-kafka-platform:problem:token-revoked"
REVOKED_TITLE = "Token revoked"
REVOKED_DETAIL = "This token, or its identity, was revoked by an operator: it opens no stream."


async def authorise(
    candidates: Iterable[Match], scope: Scope, revoked: Callable[[str, Grant], bool] | None = None
) -> Authorised | Refusal:
    """The first candidate whose guards all authorise the request, or why none did (the strongest reason: a 403
    if some token was valid, else a 401). `revoked(guard, grant)` tells a token an operator revoked."""
    refusal: Refusal | None = None
    for match in candidates:
        grants: dict[str, Grant] = {}
        failed: Refusal | None = None
        for guard, roles in match.route.guarded:
            token = credentials(scope, guard.cookie)
            if token is None:
                failed = Refusal(401, "This stream needs a token: send authorization: Bearer <token>.", False)
                break
            try:
                grant = await verifiers.get(guard).verify(token)
            except InvalidToken as exc:
                log.info("route %s, guard %s: token refused: %s", match.route.name, guard.name, exc)
                failed = Refusal(401, "The token is not valid for this stream (expired, or not ours).", True)
                break
            except KeysUnavailable as exc:
                log.warning("route %s: %s", match.route.name, exc)
                failed = Refusal(503, "The keys that verify tokens for this stream cannot be read now.", True)
                break
            if revoked is not None and revoked(guard.name, grant):
                failed = Refusal(401, REVOKED_DETAIL, True, revoked=True)
                break
            if grant.roles is None or not set(roles) <= grant.roles:
                failed = Refusal(403, "The token does not carry the roles this stream needs.", True)
                break
            grants[guard.name] = grant
        if failed is None:
            guarded = {name: grant.values() for name, grant in grants.items()}
            failed = unfit(match, guarded)
            if failed is None:
                return Authorised(Match(match.route, match.params, guarded), grants)
        if refusal is None or failed.strength > refusal.strength:
            refusal = failed
    assert refusal is not None  # noqa: S101  (candidates is never empty)
    return refusal


async def accepted_by_any(guards: Iterable[GuardSpec], token: str) -> tuple[str, Grant] | None:
    """The first of `guards` (by name) that verifies `token`, and what it reads from it; None if none does."""
    for guard in sorted(guards, key=lambda spec: spec.name):
        with contextlib.suppress(Exception):  # refused, or its keys cannot be read now
            return guard.name, await verifiers.get(guard).verify(token)
    return None
