"""JWT guards on the data plane (docs/contract.md §1, §2): who may open a stream, and what templates learn of them.

A route may name guards with the roles each requires; a request is authorised when every guard verifies its
token and finds every role. Routes are tried in order: the first that matches the path and authorises serves.
When none authorises, the answer is 401 (no token, or one that does not verify) or 403 (a valid token without
the roles). Tokens come from `authorization: Bearer`, else the `access_token` query parameter, else the cookie
the guard names.

Verification follows Zilla's `jwt` guard: the token's `kid` must name a configured key whose `alg` is the
token's; the signature, `exp`/`nbf` (no leeway), `iss` and `aud` are checked; the roles are read from a claim
path (a list as is, a string split on whitespace), and a token without that claim authorises no guarded route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import jwt
from jwt import PyJWK, PyJWKClient
from jwt.exceptions import PyJWKClientError, PyJWTError

from bindings.patterns import guard_values
from bindings.selectors import ASYMMETRIC_ALGORITHMS, GuardSpec, RouteSpec
from streams.asgi import Scope, header
from streams.routing import Match

log = logging.getLogger(__name__)

MISSING = object()


class InvalidToken(Exception):
    """A token this guard does not accept; the message says why (logged, never sent to the client)."""


class KeysUnavailable(Exception):
    """The guard's JWKS URL cannot be read or holds no usable key: our fault, not the token's."""


# JWKS fetches block; they get threads of their own so a slow identity provider never holds up the threads that
# load routes.
_jwks_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="jwks")
JWKS_TIMEOUT_S = 5
FAR_FUTURE_S = 2**53  # an exp past it is as good as never (and a float holds it exactly)


@dataclass(frozen=True)
class Session:
    """What a verified token says: who, with which roles (None: the roles claim is missing), until when."""

    identity: str | None
    roles: frozenset[str] | None
    attributes: dict[str, str] = field(default_factory=dict)
    expires_at: float | None = None  # epoch seconds

    def values(self) -> dict[str, str]:
        """The values `${guarded['<guard>'].…}` templates read."""
        found = {"identity": self.identity or ""}
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
        # The key set is cached for `lifespan` and refetched on an unknown kid; no per-key cache, so a key the
        # provider withdraws stops verifying within that time.
        self.client = (
            PyJWKClient(spec.jwks_url, cache_keys=False, lifespan=300, timeout=JWKS_TIMEOUT_S)
            if spec.jwks_url
            else None
        )

    async def key_for(self, token: str, header: Mapping[str, Any]) -> PyJWK:
        kid, alg = header.get("kid"), header.get("alg")
        if self.client is not None:
            if not isinstance(kid, str):
                raise InvalidToken("no kid")
            try:
                key = await asyncio.get_running_loop().run_in_executor(_jwks_pool, self.client.get_signing_key, kid)
            except PyJWKClientError as exc:
                if "Unable to find a signing key" in str(exc):
                    raise InvalidToken(f"no key for kid {kid!r} at the JWKS URL") from None
                raise KeysUnavailable(f"guard {self.spec.name}: JWKS: {exc}") from None
            except (PyJWTError, ValueError, OSError) as exc:
                raise KeysUnavailable(f"guard {self.spec.name}: JWKS: {exc}") from None
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

    async def verify(self, token: str) -> Session:
        try:
            jws_header = jwt.get_unverified_header(token)
        except PyJWTError as exc:
            raise InvalidToken(f"not a JWS: {exc}") from None
        key = await self.key_for(token, jws_header)
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                issuer=self.spec.issuer,
                audience=self.spec.audience,
                # As Zilla: exp and nbf, iss and aud; not iat (a provider's clock a little ahead would refuse fresh
                # tokens), nor the types of sub and jti (the identity may come from another claim).
                options={
                    "require": ["iss", "aud"],
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
        return Session(
            identity=None if identity is MISSING or identity is None else _text(identity),
            roles=roles,
            attributes=attributes,
            # PyJWT checked int(exp); one past a float's range (10**400) is as good as never.
            expires_at=None if claims.get("exp") is None else float(min(int(claims["exp"]), FAR_FUTURE_S)),
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


def route_guard_values(route: RouteSpec) -> set[tuple[str, str]]:
    """(guard, value) pairs the route's templates read, value being `identity` or `attributes.<name>`."""
    templates = [route.topic]
    for spec in route.filters:
        templates.extend(t for t in (spec.key, spec.value.equals if spec.value else None) if t)
        templates.extend(value for _, value in spec.headers)
    return {pair for template in templates for pair in guard_values(template)}


@dataclass
class Refusal:
    """Why no route authorised a request: 401 (no or bad token) or 403 (valid, without the roles)."""

    status: int
    detail: str
    token_given: bool

    @property
    def reason(self) -> str:
        """The refusal's reason, as the delivery log counts it."""
        return {401: "unauthorized", 403: "forbidden"}.get(self.status, "keys_unavailable")


@dataclass(frozen=True)
class Authorised:
    match: Match
    sessions: dict[str, Session]


async def authorise(candidates: Iterable[Match], scope: Scope) -> Authorised | Refusal:
    """The first candidate whose guards all authorise the request, or why none did (the strongest reason: a 403
    if some token was valid, else a 401)."""
    refusal: Refusal | None = None
    for match in candidates:
        sessions: dict[str, Session] = {}
        failed: Refusal | None = None
        for guard, roles in match.route.guarded:
            token = credentials(scope, guard.cookie)
            if token is None:
                failed = Refusal(401, "This stream needs a token: send authorization: Bearer <token>.", False)
                break
            try:
                session = await verifiers.get(guard).verify(token)
            except InvalidToken as exc:
                log.info("route %s, guard %s: token refused: %s", match.route.name, guard.name, exc)
                failed = Refusal(401, "The token is not valid for this stream (expired, or not ours).", True)
                break
            except KeysUnavailable as exc:
                log.warning("route %s: %s", match.route.name, exc)
                failed = Refusal(503, "The keys that verify tokens for this stream cannot be read now.", True)
                break
            if session.roles is None or not set(roles) <= session.roles:
                failed = Refusal(403, "The token does not carry the roles this stream needs.", True)
                break
            sessions[guard.name] = session
        if failed is None:
            guarded = {name: session.values() for name, session in sessions.items()}
            lacking = sorted(
                f"{guard}.{value}"
                for guard, value in route_guard_values(match.route)
                if value not in guarded.get(guard, {})
            )
            if not lacking:
                return Authorised(Match(match.route, match.params, guarded), sessions)
            # A template would render empty and match what it should not: the token lacks what the route reads.
            failed = Refusal(403, f"The token lacks what this stream needs: {', '.join(lacking)}.", True)
        if refusal is None or STRENGTH[failed.status] > STRENGTH[refusal.status]:
            refusal = failed
    assert refusal is not None  # noqa: S101  (candidates is never empty)
    return refusal


async def accepted_by_any(guards: Iterable[GuardSpec], token: str) -> bool:
    """Whether any of `guards` verifies `token`."""
    for guard in guards:
        with contextlib.suppress(Exception):  # refused, or its keys cannot be read now
            await verifiers.get(guard).verify(token)
            return True
    return False
