"""Revocations: an operator cuts off a guard's identity, or one token (its `jti`), before its tokens expire.

A revocation names a guard and exactly one of an identity (what the guard's identity claim reads) or a token id
(the `jti` claim), and holds until `until`: the web processes then refuse it no longer, with no cleanup needed. A
token needs refusing only until it expires, so `until` is at most the lifetime of the tokens already issued (for an
identity, of the last one issued before the cut-off is made in the identity provider).

The model has a module of its own in `bindings.models`, whose face hands it to Django. Writes go through
`bindings.services` (history and change events), reads for the data plane through `bindings.selectors`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

CLAIM_MAX_CHARS = 255


class Revocation(models.Model):
    """Tokens of `guard` whose identity is `identity`, or whose `jti` is `jti`, are refused until `until`."""

    guard = models.ForeignKey(
        "bindings.Guard",
        on_delete=models.CASCADE,
        related_name="revocations",
        help_text="The guard whose tokens are revoked.",
    )
    identity = models.CharField(
        max_length=CLAIM_MAX_CHARS,
        blank=True,
        help_text="Every token of this identity (the guard's identity claim, e.g. sub); or give a token id.",
    )
    jti = models.CharField(
        "token id",
        max_length=CLAIM_MAX_CHARS,
        blank=True,
        help_text="One token, by its `jti` claim; or give an identity.",
    )
    until = models.DateTimeField(
        help_text="When the revocation lapses: at least until the revoked tokens expire.", db_index=True
    )
    reason = models.TextField(blank=True, help_text="Why, for the operators (never sent to clients).")
    created_by = models.CharField(max_length=150, editable=False, help_text="Who revoked.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at", "-id"]
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.CheckConstraint(
                condition=(models.Q(identity="") & ~models.Q(jti="")) | (~models.Q(identity="") & models.Q(jti="")),
                name="revocation_identity_or_jti",
            )
        ]

    def __str__(self) -> str:
        what = f"identity {self.identity}" if self.identity else f"token {self.jti}"
        return f"{what} ({getattr(self.guard, 'name', '?')}) until {self.until:%Y-%m-%d %H:%M}"

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.identity and self.jti:
            errors["jti"] = ["Give an identity or a token id, not both: make two revocations for both."]
        elif not self.identity and not self.jti:
            errors["identity"] = ["Give the identity to revoke, or a token id (jti)."]
        if self.until is not None and self.until <= timezone.now():
            errors["until"] = ["This time has passed: a revocation until then would refuse nothing."]
        if errors:
            raise ValidationError(errors)


def revocation_representation(revocation: Revocation) -> dict[str, Any]:
    """A revocation as the API shows it and the history records it."""
    return {
        "id": revocation.pk,
        "guard": revocation.guard.name,
        "identity": revocation.identity,
        "jti": revocation.jti,
        "until": revocation.until.isoformat(),
        "reason": revocation.reason,
        "created_by": revocation.created_by,
        "created_at": revocation.created_at.isoformat() if revocation.created_at else None,
    }
