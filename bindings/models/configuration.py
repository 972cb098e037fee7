"""Routes, their conditions, filters and guards, and the change history: configuration stored in Postgres and
edited in the admin and the API (the endpoints and guards routes name are `endpoints.py` and `guards.py`).

Each model's `clean()` checks what the object can check alone, keyed by field; checks that need a route
together with its conditions and filters (the `${params.x}` a template uses must be declared by every path
pattern) run in `check_route_params`, which the admin and `bindings.services` share.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from bindings.expressions import ExpressionError, compile_expression
from bindings.models.endpoints import Endpoint, default_endpoint
from bindings.models.guards import Guard
from bindings.patterns import (
    PathPattern,
    PatternError,
    check_expressions,
    check_not_internal,
    check_params,
    check_topic_name,
    check_value_path,
    guard_refs,
    guard_values,
    parse_path,
    touching_placeholders,
)
from bindings.pointers import MAX_POINTER_LENGTH, check_fields

# The two `with.event.id` values Zilla accepts; they select an encoding, they are not templates.
EVENT_ID_ETAG = "${etag}"
EVENT_ID_KEY_AND_ETAG = '["${base64(key)}","${etag}"]'
START_HISTORICAL = "historical"
START_LIVE = "live"
SLOW_CLIENT_CLOSE = "close"
SLOW_CLIENT_CONFLATE = "conflate"
SHOWN = 60  # characters of a filter's expression its name shows
MAX_CONFLATE_MS = 3_600_000  # an hour: a longer interval is no live stream


class Route(models.Model):
    """An sse-kafka route: requests whose path matches any of its conditions stream the messages of `topic`."""

    class EventId(models.TextChoices):
        ETAG = EVENT_ID_ETAG, "${etag}: progress through the topic"
        KEY_AND_ETAG = EVENT_ID_KEY_AND_ETAG, '["${base64(key)}","${etag}"]: the message key and progress'

    class Start(models.TextChoices):
        HISTORICAL = START_HISTORICAL, "historical: from the earliest retained message"
        LIVE = START_LIVE, "live: from the end of the topic"

    class SlowClient(models.TextChoices):
        CLOSE = SLOW_CLIENT_CLOSE, "close: the client resumes with nothing lost"
        CONFLATE = SLOW_CLIENT_CONFLATE, "conflate: the client keeps the latest value per key"

    name = models.SlugField(max_length=100, unique=True, help_text="Unique name, used by the API to provision.")
    position = models.PositiveIntegerField(default=0, help_text="Routes are tried in ascending position.")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, default=default_endpoint, related_name="routes")
    topic = models.CharField(
        max_length=255, help_text="Kafka topic; may use ${params.name} declared by every path pattern."
    )
    event_id = models.CharField(
        max_length=64, choices=EventId.choices, default=EVENT_ID_ETAG, help_text="The `id:` of each event."
    )
    start = models.CharField(max_length=16, choices=Start.choices, default=START_HISTORICAL)
    caught_up = models.BooleanField(
        default=False, help_text="Send a `caught-up` event once the stream reaches the live end of the topic."
    )
    slow_client = models.CharField(
        max_length=16,
        choices=SlowClient.choices,
        default=SLOW_CLIENT_CLOSE,
        help_text=(
            "What happens to a client that falls behind: close it (it resumes from its Last-Event-ID with "
            "nothing lost), or conflate (it keeps only the latest pending value per key: dashboards of current "
            "state never fall behind, but intermediate values are skipped)."
        ),
    )
    fields = ArrayField(
        models.CharField(max_length=MAX_POINTER_LENGTH),
        default=list,
        blank=True,
        help_text=(
            "JSON Pointers, e.g. /price, /item/name: only those parts of each JSON value are sent (nested shape "
            "kept); a client may ask for fewer with ?fields=. Empty: the whole value."
        ),
    )
    conflate_ms = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_CONFLATE_MS)],
        help_text=(
            "Milliseconds: each stream gets at most one event per key in this interval, the latest value of that "
            "key (0: every event); a client may ask a longer interval with ?conflate_ms=."
        ),
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.name} -> {self.topic}"

    def clean(self) -> None:
        field_problems = check_fields(list(self.fields or []))
        if field_problems:
            raise ValidationError({"fields": [message for _, message in field_problems]})
        if not self.topic:  # reported as blank, or left out by a form after its own error
            return
        try:
            check_topic_name(self.topic)
            check_not_internal(self.topic, settings.SSE_INTERNAL_TOPICS)
        except PatternError as exc:
            raise ValidationError({"topic": str(exc)}) from None


class RouteCondition(models.Model):
    """A `when` entry: the route matches a request whose path matches `path`."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="conditions")
    path = models.CharField(
        max_length=255, help_text="Path pattern, e.g. /items or /items/{id}; {name} matches one path segment."
    )
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering: ClassVar[list[str]] = ["position", "id"]

    def __str__(self) -> str:
        return self.path

    def pattern(self) -> PathPattern:
        return parse_path(self.path)

    def clean(self) -> None:
        if not self.path:  # reported as blank
            return
        try:
            self.pattern()
        except PatternError as exc:
            raise ValidationError({"path": str(exc)}) from None


class RouteFilter(models.Model):
    """A `with.filters` entry: the key, every header, the value condition and the expression must all match."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="filters")
    position = models.PositiveIntegerField(default=0)
    # None means "any key"; "" is the empty key.
    key = models.CharField(  # noqa: DJ001
        max_length=1000, null=True, blank=True, help_text="Message key; may use ${params.name}."
    )
    headers = models.JSONField(
        default=dict,
        blank=True,
        help_text='Header name -> value, e.g. {"tag": "${params.tag}"}; a message matches if it has every one.',
    )
    value_path = models.CharField(
        max_length=255, blank=True, help_text="Dotted path into a JSON value, e.g. status or item.status."
    )
    value_equals = models.CharField(
        max_length=1000, blank=True, help_text="The string the value at `value path` must equal; templated."
    )
    expression = models.TextField(
        blank=True,
        default="",
        help_text=(
            "A CEL expression that must be true, e.g. value.order.total > 100.0 && value.region == params.region; "
            "it reads value, key, headers, params and guarded (docs/contract.md §7)."
        ),
    )

    class Meta:
        ordering: ClassVar[list[str]] = ["position", "id"]

    def __str__(self) -> str:
        parts = []
        if self.key is not None:
            parts.append(f"key={self.key}")
        if isinstance(self.headers, dict):
            parts.extend(f"{name}={value}" for name, value in sorted(self.headers.items()))
        if self.value_path:
            parts.append(f"{self.value_path}={self.value_equals}")
        if self.expression:
            parts.append(self.expression if len(self.expression) <= SHOWN else self.expression[: SHOWN - 1] + "…")
        return ", ".join(parts) or "(empty filter)"

    def header_items(self) -> list[tuple[str, str]]:
        """The headers as (name, value) pairs sorted by name; call after `clean()`."""
        return sorted(self.headers.items()) if isinstance(self.headers, dict) else []

    def templates(self) -> Iterator[tuple[str, str, str]]:
        """(field, description, template) for each templated value, for `check_route_params`."""
        if self.key:
            yield "key", "a filter's key", self.key
        for name, value in self.header_items():
            if isinstance(value, str):
                yield "headers", f"a filter's header {name!r}", value
        if self.value_equals:
            yield "value_equals", "a filter's value", self.value_equals

    def clean(self) -> None:
        if self.headers is None:  # an empty JSON field in a form
            self.headers = {}
        errors: dict[str, list[str]] = {}

        def add(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        if self.key:
            try:
                check_expressions(self.key)
            except PatternError as exc:
                add("key", str(exc))
        if not isinstance(self.headers, dict):
            add("headers", 'Headers are an object of header name -> value, e.g. {"tag": "x"}.')
        else:
            for name, value in self.headers.items():
                if not name:
                    add("headers", "A header name cannot be empty.")
                if not isinstance(value, str):
                    add("headers", f"Header {name!r}: the value must be a string, not {_json_type(value)}.")
                    continue
                try:
                    check_expressions(value)
                except PatternError as exc:
                    add("headers", f"Header {name!r}: {exc}")
        if self.value_path:
            try:
                check_value_path(self.value_path)
            except PatternError as exc:
                add("value_path", str(exc))
        elif self.value_equals:
            add("value_path", "A value filter needs the path of the value to compare.")
        if self.value_equals:
            try:
                check_expressions(self.value_equals)
            except PatternError as exc:
                add("value_equals", str(exc))
        if self.expression:
            try:
                compile_expression(self.expression)
            except ExpressionError as exc:
                add("expression", str(exc))
        if (
            self.key is None
            and not self.headers
            and not self.value_path
            and not self.value_equals
            and not self.expression
        ):
            add(NON_FIELD_ERRORS, "A filter needs a key, a header, a value condition or an expression.")
        if errors:
            raise ValidationError(errors)


class RouteGuard(models.Model):
    """A `guarded` entry: the guard must authorise the request, with every one of `roles`."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="guards")
    guard = models.ForeignKey(Guard, on_delete=models.PROTECT, related_name="route_guards")
    roles = ArrayField(
        models.CharField(max_length=255), default=list, blank=True, help_text="Roles the token must all have."
    )

    class Meta:
        ordering: ClassVar[list[str]] = ["id"]
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "guard"], name="route_guard_once")
        ]

    def __str__(self) -> str:
        return f"{self.guard.name}: {' '.join(self.roles) or '(any role)'}"

    def clean(self) -> None:
        roles = list(self.roles or [])
        if any(not role or role != role.strip() or any(c.isspace() for c in role) for role in roles):
            raise ValidationError({"roles": "A role is a word without spaces, e.g. read:items."})


class Change(models.Model):
    """Who changed what: one row per configuration write, with the object before and after."""

    class Action(models.TextChoices):
        CREATE = "create"
        UPDATE = "update"
        DELETE = "delete"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=150, help_text="The user, or the command or process, that wrote.")
    source = models.CharField(max_length=32, help_text="admin, api, import, command or shell.")
    action = models.CharField(max_length=16, choices=Action.choices)
    kind = models.CharField(max_length=32, help_text="endpoint, route, guard, revocation, catalog or topic-model.")
    name = models.CharField(max_length=255, help_text="The object's name (a topic model's topic pattern).")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-at", "-id"]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["kind", "name"])]

    def __str__(self) -> str:
        return f"{self.actor} {self.action}d {self.kind} {self.name}"

    def changed_fields(self) -> list[str]:
        """The top-level fields whose value differs between before and after."""
        before, after = self.before or {}, self.after or {}
        return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_route_params(
    topic: str | None,
    conditions: Sequence[RouteCondition | None],
    filters: Sequence[RouteFilter | None],
    guards: Iterable[str] | Mapping[str, Collection[str]] | None = None,
) -> tuple[list[str], dict[int, list[str]], dict[int, dict[str, list[str]]]]:
    """Check the `${params.x}` of the topic and filters against every condition's pattern, and their
    `${guarded['g']...}` against the route's `guards` (None: not checked; a mapping of guard name -> attribute
    names checks the attributes too).

    Entries that are None, or that failed their own validation, are left out (they carry their own errors).
    Returns (topic errors, errors by condition index -> messages, errors by filter index -> field -> messages).
    """
    patterns: dict[int, PathPattern] = {}
    for index, condition in enumerate(conditions):
        if condition is not None:
            try:
                patterns[index] = condition.pattern()
            except PatternError:
                continue
    uses: list[tuple[tuple[int, str], str, str]] = []
    if topic:
        uses.append(((-1, "topic"), "the topic", topic))
    for index, route_filter in enumerate(filters):
        if route_filter is not None:
            uses.extend(((index, field), what, template) for field, what, template in route_filter.templates())
    template_errors, condition_errors = check_params(patterns, uses)
    for where, _, template in uses:
        for message in touching_placeholders(template):
            template_errors.setdefault(where, []).append(message)
    if guards is not None:
        names = set(guards)
        for where, _, template in uses:
            for guard in sorted(guard_refs(template) - names):
                template_errors.setdefault(where, []).append(
                    f"${{guarded[{guard!r}]...}}: the route is not guarded by {guard!r}."
                )
            if isinstance(guards, Mapping):  # guard -> its attribute names: check those too
                for guard, value in sorted(guard_values(template)):
                    attribute = value.removeprefix("attributes.")
                    if guard in guards and value != "identity" and attribute not in guards[guard]:
                        template_errors.setdefault(where, []).append(
                            f"${{guarded[{guard!r}].{value}}}: guard {guard!r} has no attribute {attribute!r}."
                        )
    filter_errors: dict[int, dict[str, list[str]]] = {}
    for (index, field), messages in template_errors.items():
        if index >= 0:
            filter_errors.setdefault(index, {})[field] = messages
    return template_errors.get((-1, "topic"), []), condition_errors, filter_errors


def routes_in_order() -> models.QuerySet[Route]:
    """Every route in the order they are tried, with its endpoint, paths, filters and guards: four queries."""
    return (
        Route.objects.select_related("endpoint")
        .prefetch_related(
            models.Prefetch("conditions", queryset=RouteCondition.objects.order_by("position", "id")),
            models.Prefetch("filters", queryset=RouteFilter.objects.order_by("position", "id")),
            models.Prefetch("guards", queryset=RouteGuard.objects.select_related("guard").order_by("id")),
        )
        .order_by("position", "id")
    )
