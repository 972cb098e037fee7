"""Configuration stored in Postgres and edited in the admin and the API."""

from __future__ import annotations

from typing import ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from bindings.patterns import PathPattern, PatternError, check_topic, parse_path


class Route(models.Model):
    """An sse-kafka route: requests whose path matches `path` stream the messages of `topic`."""

    name = models.SlugField(max_length=100, unique=True, help_text="Unique name, used by the API to provision.")
    path = models.CharField(
        max_length=255,
        help_text="Path pattern, e.g. /items or /items/{id}; {name} matches one path segment.",
    )
    topic = models.CharField(
        max_length=255,
        validators=[RegexValidator(r"^\S+$", "A topic name has no spaces.")],
        help_text="Kafka topic; may use ${params.name} from the path pattern.",
    )
    position = models.PositiveIntegerField(default=0, help_text="Routes are tried in ascending position.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.path} -> {self.topic}"

    def pattern(self) -> PathPattern:
        return parse_path(self.path)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        declared: frozenset[str] = frozenset()
        try:
            declared = self.pattern().params
        except PatternError as exc:
            errors["path"] = str(exc)
        try:
            check_topic(self.topic, declared)
        except PatternError as exc:
            errors["topic"] = str(exc)
        if errors:
            raise ValidationError(errors)
