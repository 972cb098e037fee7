"""Test key pairs and tokens for JWT guards: real RSA keys, made once per test session."""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ISSUER = "https://auth.example.com"
AUDIENCE = "sse-platform"


@functools.cache
def private_key(kid: str = "k1") -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(kid: str = "k1") -> dict[str, Any]:
    """The public half as a JWK with `kid` and `alg`, as a guard's `keys` lists it."""
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(private_key(kid).public_key()))
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


def token(
    sub: str | None = "alice",
    *,
    scope: str | list[str] = "read",
    kid: str = "k1",
    expires_in: float | None = 3600,
    issuer: str = ISSUER,
    audience: str = AUDIENCE,
    **claims: Any,
) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {"iss": issuer, "aud": audience, "iat": now, **claims}
    if expires_in is not None:  # None: a token without exp
        payload.setdefault("exp", now + expires_in)
    if sub is not None:
        payload["sub"] = sub
    if scope is not None:
        payload["scope"] = scope
    return jwt.encode(payload, private_key(kid), algorithm="RS256", headers={"kid": kid})


def guard_fields(name: str = "jwt", **overrides: Any) -> dict[str, Any]:
    """Keyword arguments of `do_put_guard` for a guard that accepts `token()`."""
    return {"name": name, "issuer": ISSUER, "audience": AUDIENCE, "keys": [public_jwk()], **overrides}
