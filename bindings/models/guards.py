"""Guards: the JWT guards routes are guarded by (Zilla's `jwt` guard), which tokens each accepts and what it reads
from them (docs/contract.md §1).

A guard holds public keys only, or a JWKS URL (https) to read them from; `clean()` checks each key can verify
tokens (`key_errors`) and is no private key, keyed by field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from jwt import PyJWK
from jwt.exceptions import InvalidKeyError, PyJWKError

from bindings.patterns import (
    ATTRIBUTE_NAME,
    VALUE_PATH,
    PatternError,
    check_value_path,
)

# Only public-key algorithms: a guard holds keys that verify, never secrets that could also sign.
# RFC 7517/7518 members that only private (or symmetric) keys have.
PRIVATE_JWK_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


# A guard's default claims: Zilla's (and OAuth's) `scope` for roles, `sub` for the caller's identity.
DEFAULT_ROLES_CLAIM = "scope"
DEFAULT_IDENTITY_CLAIM = "sub"


class Guard(models.Model):
    """A JWT guard (Zilla's `jwt` guard): which tokens it accepts and what it reads from them (docs/contract.md §1)."""

    name = models.SlugField(max_length=100, unique=True, help_text="Unique name; routes and templates use it.")
    issuer = models.CharField(max_length=255, help_text="The `iss` claim a token must carry, exactly.")
    audience = models.CharField(max_length=255, help_text="A value the token's `aud` claim must contain.")
    keys = models.JSONField(
        default=list,
        blank=True,
        help_text='Public keys, a JWKS list: [{"kty": "RSA", "kid": "...", "alg": "RS256", "n": "...", "e": "..."}].',
    )
    jwks_url = models.URLField(
        max_length=500, blank=True, help_text="Or a JWKS URL the keys are read from (instead of listing them)."
    )
    roles_claim = models.CharField(
        max_length=255,
        default=DEFAULT_ROLES_CLAIM,
        help_text="Dotted path of the roles claim; a list is used as is, a string is split on whitespace.",
    )
    identity_claim = models.CharField(
        max_length=255, default=DEFAULT_IDENTITY_CLAIM, help_text="The claim that names the caller."
    )
    attributes = models.JSONField(
        default=dict,
        blank=True,
        help_text='Attribute name -> dotted claim path, e.g. {"tenant": "org.id"}; templates read '
        "${guarded['<guard>'].attributes.tenant}.",
    )
    challenge_s = models.PositiveIntegerField(
        default=0, help_text="Seconds before the token expires to send a `challenge` event; 0: no challenge."
    )
    cookie = models.CharField(
        max_length=255, blank=True, help_text="A cookie that may carry the token (after the header and the query)."
    )
    allow_tokens_without_exp = models.BooleanField(
        default=False,
        help_text="Accept tokens without an `exp` claim; their streams never end for expiry. "
        "Off: such a token is refused (401), since nothing would ever end its streams.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}

        def add(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        keys = self.keys
        if keys is None:
            keys = self.keys = []
        if not isinstance(keys, list):
            add("keys", "Keys are a JWKS list: a list of JWK objects.")
        else:
            for index, message in key_errors(keys):
                add("keys", f"Key {index + 1}: {message}" if index >= 0 else message)
        if keys and self.jwks_url:
            add("jwks_url", "Give the keys or a JWKS URL, not both.")
        if not keys and not self.jwks_url:
            add("keys", "A guard needs its public keys, or a JWKS URL to read them from.")
        if self.jwks_url and not self.jwks_url.lower().startswith("https://") and not settings.SSE_JWKS_ALLOW_HTTP:
            add("jwks_url", "A JWKS URL starts with https://: keys read over plain http could be swapped on the way.")
        for field in ("roles_claim", "identity_claim"):
            value = getattr(self, field)
            if value:
                try:
                    check_value_path(value)
                except PatternError:
                    add(field, "A claim path is claim names separated by '.', e.g. scope or realm_access.roles.")
        if self.attributes is None:
            self.attributes = {}
        if not isinstance(self.attributes, dict):
            add("attributes", 'Attributes are an object of name -> claim path, e.g. {"tenant": "org.id"}.')
        else:
            for name, claim in self.attributes.items():
                if not ATTRIBUTE_NAME.fullmatch(name):
                    add("attributes", f"Attribute {name!r}: a name has letters, digits, '_' and '-'.")
                if not isinstance(claim, str) or not VALUE_PATH.fullmatch(claim):
                    add("attributes", f"Attribute {name!r}: the claim path is a string like org.id.")
        if errors:
            raise ValidationError(errors)


def key_errors(keys: list[Any]) -> Iterator[tuple[int, str]]:
    """Why each JWK of `keys` cannot verify tokens, as (index, message); nothing if all can."""
    seen: set[str] = set()
    for index, jwk in enumerate(keys):
        if not isinstance(jwk, dict):
            yield index, "a JWK is an object."
            continue
        kid, alg = jwk.get("kid"), jwk.get("alg")
        if not isinstance(kid, str) or not kid:
            yield index, "a key needs a `kid`: tokens name the key that signed them."
        elif kid in seen:
            yield index, f"`kid` {kid!r} is used twice."
        else:
            seen.add(kid)
        private = sorted(PRIVATE_JWK_MEMBERS & jwk.keys())
        if private:
            yield (
                index,
                (
                    f"this is a private key ({', '.join(private)}): give only the public key; a guard verifies tokens "
                    "and must never hold what signs them."
                ),
            )
            continue
        if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
            yield index, f"`alg` must be one of {', '.join(ASYMMETRIC_ALGORITHMS)} (a public-key algorithm)."
            continue
        try:
            PyJWK(jwk, algorithm=alg)
        except (PyJWKError, InvalidKeyError, ValueError, TypeError) as exc:
            yield index, f"not a usable {alg} public key ({exc})."
