"""Endpoints: the SSE servers routes are served on (Zilla's `sse` server), with what their routes share: the
retry and keep-alive, the origins browsers may open streams from, and the streams a client or an identity may hold.

`clean()` checks what an endpoint can check alone, keyed by field (an origin is exactly `scheme://host[:port]`).
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import urlsplit

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models

DEFAULT_ENDPOINT = "default"
# An endpoint's defaults, declared once: the model fields, the data plane's spec, the services and the importers.
DEFAULT_RETRY_MS = 2000
DEFAULT_KEEPALIVE_S = 15


def _origin_error(origin: str) -> str | None:
    """Why `origin` is not `*` or an exact origin (scheme://host[:port]), or None if it is one."""
    if origin == "*":
        return None
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or not parts.scheme
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or origin != f"{parts.scheme}://{parts.netloc}"
        or (port is None and parts.netloc.endswith(":"))
    ):
        return f"{origin!r} is not an origin: write scheme://host[:port] with no path, e.g. https://app.example.com."
    if origin != origin.lower():
        return (
            f"{origin!r}: browsers send origins in lower case and they are compared exactly; write {origin.lower()!r}."
        )
    return None


class Endpoint(models.Model):
    """An SSE endpoint (Zilla's `sse` server): settings shared by the routes it serves."""

    name = models.SlugField(max_length=100, unique=True)
    retry_ms = models.PositiveIntegerField(
        default=DEFAULT_RETRY_MS, help_text="Sent as `retry:` first: how long a browser waits before reconnecting."
    )
    keepalive_s = models.PositiveIntegerField(
        default=DEFAULT_KEEPALIVE_S,
        help_text="Seconds of silence before a keep-alive comment; 0 turns keep-alives off.",
    )
    cors_origins = ArrayField(
        models.CharField(max_length=255),
        default=list,
        blank=True,
        help_text="Origins allowed to open streams from a browser, e.g. https://app.example.com, or *.",
    )
    cors_credentials = models.BooleanField(
        default=False, help_text="Let browsers send cookies and HTTP authentication with cross-origin requests."
    )
    max_streams_per_client = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Streams one client address may hold open on this endpoint in one web process (more get a 429); "
        "empty: the SSE_MAX_STREAMS_PER_CLIENT setting, 0: no limit.",
    )
    max_streams_per_identity = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Streams one guard identity may hold open on this endpoint in one web process (more get a 429); "
        "empty: the SSE_MAX_STREAMS_PER_IDENTITY setting, 0: no limit.",
    )

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        origins = list(self.cors_origins or [])
        origin_errors = [message for origin in origins if (message := _origin_error(origin)) is not None]
        if "*" in origins and len(origins) > 1:
            origin_errors.append("'*' allows every origin: list it alone.")
        if origin_errors:
            errors["cors_origins"] = origin_errors
        elif "*" in origins and self.cors_credentials:
            errors["cors_credentials"] = [
                "Browsers refuse credentials when any origin ('*') is allowed: list the exact origins instead."
            ]
        if errors:
            raise ValidationError(errors)


def default_endpoint() -> int:
    """The `default` endpoint's id; created here if missing (the migration creates it, a flushed database not)."""
    return Endpoint.objects.get_or_create(name=DEFAULT_ENDPOINT)[0].pk
