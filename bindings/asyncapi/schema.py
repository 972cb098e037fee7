"""How our configuration maps to an AsyncAPI document: the `x-sse-kafka` keys of channels and of the document,
the event-id forms, and the descriptions the export writes (used by the export and the import alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bindings.models import (
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
)

EXTENSION = "x-sse-kafka"
SSE_PROTOCOLS = frozenset({"http", "https", "sse"})
EVENT_ID_FORMS = {"etag": EVENT_ID_ETAG, "key-and-etag": EVENT_ID_KEY_AND_ETAG}
_FORM_OF_EVENT_ID = {template: form for form, template in EVENT_ID_FORMS.items()}

# x-sse-kafka key on a channel -> do_put_route argument, and the type the value must have.
_ROUTE_KEYS: dict[str, tuple[str, type | tuple[type, ...], str]] = {
    "route": ("name", str, "a string"),
    "position": ("position", int, "an integer"),
    "endpoint": ("endpoint", str, "a string"),
    "topic": ("topic", str, "a string"),
    "filters": ("filters", list, "a list"),
    "event-id": ("event_id", str, "a string"),
    "start": ("start", str, "a string"),
    "caught-up": ("caught_up", bool, "true or false"),
    "slow-client": ("slow_client", str, "a string"),
    "fields": ("fields", list, "a list of JSON Pointers"),
    "conflate-ms": ("conflate_ms", int, "a whole number of milliseconds"),
    "guarded": ("guarded", dict, 'an object of guard name -> roles, e.g. {"jwt": ["read:items"]}'),
}
_DOCUMENT_KEY = {argument: key for key, (argument, _, _) in _ROUTE_KEYS.items()}
_ENDPOINT_KEYS: dict[str, tuple[str, type, str]] = {
    "retry-ms": ("retry_ms", int, "an integer"),
    "keepalive-s": ("keepalive_s", int, "an integer"),
    "cors-origins": ("cors_origins", list, "a list of origins"),
    "cors-credentials": ("cors_credentials", bool, "true or false"),
}
_GUARD_KEYS: dict[str, tuple[str, type, str]] = {
    "issuer": ("issuer", str, "a string"),
    "audience": ("audience", str, "a string"),
    "keys": ("keys", list, "a JWKS list of public keys"),
    "jwks-url": ("jwks_url", str, "a URL"),
    "roles-claim": ("roles_claim", str, "a claim path"),
    "identity-claim": ("identity_claim", str, "a claim path"),
    "attributes": ("attributes", dict, "an object of name -> claim path"),
    "challenge-s": ("challenge_s", int, "an integer"),
    "cookie": ("cookie", str, "a cookie name"),
    "allow-tokens-without-exp": ("allow_tokens_without_exp", bool, "true or false"),
}
# Top-level x-sse-kafka: what routes refer to by name, written before the routes.
_NAMED: dict[str, tuple[str, dict[str, tuple[str, type, str]], tuple[str, ...]]] = {
    "guards": ("guard", _GUARD_KEYS, ("issuer", "audience")),
    "endpoints": ("endpoint", _ENDPOINT_KEYS, ()),
}

ETAG_ID = (
    "`${etag}`: base64url (padded) of a byte 0x01, the zig-zag varint partition count, then for every partition of "
    "the topic its number and the next offset to read (zig-zag varints); `/` and the message's `etag` header follow "
    "when it has one."
)
KEY_AND_ETAG_ID = (
    'A JSON array `["<base64url key>","<etag>"]` (`null` for a message without a key), where `<etag>` is the '
    + ETAG_ID.removesuffix(".")
    + "."
)
RESUME = (
    "A browser sends the last `id:` it received back as `Last-Event-ID` when it reconnects (or give it as the "
    "`lastEventId` query parameter); the stream resumes exactly after that event, nothing lost or repeated."
)


# Export


def _unique(name: str, taken: Mapping[str, Any]) -> str:
    """`name`, or `name-2`, `name-3`... if a channel has it (route `a` with two paths and a route `a-1`)."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}-{number}"
    return candidate
