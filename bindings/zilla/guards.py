"""Reading a zilla.yaml's `jwt` guards into guard plans: options to fields, JWK key material to base64url."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bindings.patterns import GUARD_NAME
from bindings.zilla.plan import _GUARD_KEYS, _JWT_OPTIONS, MAX_NAME, _GuardPlan, _int, _Plan, _unknown

_KEY_MATERIAL = ("n", "e", "x", "y")


def _plan_guard(plan: _Plan, name: str, guard: Any) -> None:
    where = f"guards.{name}"
    if not isinstance(guard, Mapping):
        plan.error(where, "A guard is a mapping with a type and options.")
        return
    if not isinstance(guard.get("type"), str):
        plan.error(f"{where}.type", "A guard needs a type (jwt, ...).")
        return
    if guard.get("type") != "jwt":
        plan.ignored.append(f"guard {name} ({guard.get('type')}): ignored, only jwt guards are imported")
        return
    _unknown(plan, where, guard, _GUARD_KEYS)
    if not GUARD_NAME.fullmatch(name) or len(name) > MAX_NAME:
        plan.error(where, "A guard's name has letters, digits, '_' and '-'.")
        return
    options = guard.get("options")
    if not isinstance(options, Mapping):
        plan.error(f"{where}.options", "A jwt guard needs options: issuer, audience and keys.")
        return
    _unknown(plan, f"{where}.options", options, _JWT_OPTIONS)
    fields: dict[str, Any] = {}
    for key, target in (
        ("issuer", "issuer"),
        ("audience", "audience"),
        ("roles", "roles_claim"),
        ("identity", "identity_claim"),
        ("cookie", "cookie"),
    ):
        if key in options:
            if not isinstance(options[key], str):
                plan.error(f"{where}.options.{key}", f"`{key}` is a string.")
            else:
                fields[target] = options[key]
    for key in ("issuer", "audience"):
        if key not in options:
            plan.error(f"{where}.options.{key}", f"A jwt guard needs its {key}: without it Zilla refuses every token.")
    keys = options.get("keys")
    if keys is None:
        # Zilla's default: the issuer's well-known JWKS, without doubling a trailing slash.
        issuer = str(options.get("issuer", ""))
        fields["jwks_url"] = f"{issuer.rstrip('/')}/.well-known/jwks.json"
        fields["keys"] = []
    elif isinstance(keys, str):
        fields["jwks_url"], fields["keys"] = keys, []
    elif isinstance(keys, list):
        fields["keys"], fields["jwks_url"] = [normalise_jwk(key) for key in keys], ""
    else:
        plan.error(f"{where}.options.keys", "Keys are a list of JWKs, or the URL of a JWKS.")
    attributes = options.get("attributes", {})
    if not isinstance(attributes, Mapping) or not all(isinstance(v, str) for v in attributes.values()):
        plan.error(f"{where}.options.attributes", "Attributes map a name to a claim path (a string).")
    else:
        fields["attributes"] = {str(k): v for k, v in attributes.items()}
    if "challenge" in options and (challenge := _int(plan, f"{where}.options.challenge", options["challenge"])):
        fields["challenge_s"] = challenge
    plan.guards.append(_GuardPlan(where=where, name=name, fields=fields))


def normalise_jwk(key: Any) -> Any:
    """The JWK with its key material in base64url without padding, as RFC 7517 writes it.

    Zilla's example configs write RSA `n` in standard base64 (`+`, `/`, `=`), which jose4j accepts; rewritten
    here so every key is stored in one form and any JWK library reads it.
    """
    if not isinstance(key, Mapping):
        return key
    found = dict(key)
    for name in _KEY_MATERIAL:
        value = found.get(name)
        if isinstance(value, str):
            found[name] = value.strip().replace("+", "-").replace("/", "_").rstrip("=")
    return found
