"""Catalogs of schemas and the models that say how each topic's keys and values are encoded, as Zilla's.

- A `Catalog` is where schemas come from: `inline` (its `InlineSchema` rows, kept here) or a Confluent-compatible
  registry (`schema-registry`, `karapace`, `apicurio`) at `url`, with an optional `Authorization` header (`auth`,
  write-only: never shown back) and a cache lifetime (`max_age_s`, Zilla's `max-age`). The header is the
  registry's at `url`: a URL never carries credentials (`user:pass@` is refused), and a write that moves the
  catalog to another scheme, host or port removes the header unless it gives one (`same_origin`).
- An `InlineSchema` is one version of a subject's schema. Saving a subject with another text makes version N+1;
  older versions stay, so a model pinned to one keeps it. A subject may hold `*` wildcards (`*-value`).
- A `TopicModel` covers the topics its `topic` names (a Kafka topic name, `*` matching any run of characters, so
  `orders-*` covers the topics a route with `orders-${params.region}` reads) and gives the key's and the value's
  model: `avro`, `protobuf` (with its `record`), `json`, `string` (with an `encoding`) or a number. The schema
  is chosen in the catalog by `strategy`: `topic` (subject `<topic>-key` / `<topic>-value`), `id`, or `subject`
  and `version`. When several cover a topic, the most specific wins (`topic_specificity`).

Each `clean()` checks what the object can check with the catalog in hand and keys each message by its field
(`key_catalog`, `value_subject`); writes go through `bindings.services`, reads for the data plane through
`bindings.selectors`.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ValidationError
from django.db import models

from bindings.schemas import AVRO, JSON, PROTOBUF, check_schema, encoding_problem, proto_messages

DEFAULT_MAX_AGE_S = 300  # Zilla's `max-age` default: seconds a registry's schema is cached
DEFAULT_ENCODING = "utf_8"
LATEST = "latest"
SIDES = ("key", "value")
MAX_TOPIC = 249  # Kafka's limit on a topic name
TOPIC_PATTERN = re.compile(r"[a-zA-Z0-9._*-]{1,249}")
SUBJECT = re.compile(r"[a-zA-Z0-9._*-]{1,255}")


class Catalog(models.Model):
    """Where the schemas of topic models come from: inline, or a Confluent-compatible registry."""

    class Kind(models.TextChoices):
        INLINE = "inline", "inline: schemas kept here, under subjects"
        SCHEMA_REGISTRY = "schema-registry", "schema-registry: a Confluent Schema Registry"
        KARAPACE = "karapace", "karapace: Karapace's Confluent-compatible API"
        APICURIO = "apicurio", "apicurio: Apicurio Registry's Confluent-compatible API"

    name = models.SlugField(max_length=100, unique=True, help_text="Unique name; topic models name it.")
    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.INLINE)
    url = models.CharField(
        max_length=500, blank=True, help_text="A registry's base URL, e.g. http://registry:8081 (not for inline)."
    )
    auth = models.CharField(
        max_length=2000,
        blank=True,
        help_text="The Authorization header sent to the registry, e.g. Basic dXNlcjpwYXNz; write-only.",
    )
    auth_updated = models.DateTimeField(null=True, blank=True, editable=False)
    max_age_s = models.PositiveIntegerField(
        default=DEFAULT_MAX_AGE_S, help_text="Seconds a registry's schema is cached before it is read again."
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def is_registry(self) -> bool:
        return self.kind != self.Kind.INLINE

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.is_registry and not self.url:
            errors["url"] = ["A registry catalog needs the registry's URL."]
        elif self.url and not _is_http_url(self.url):
            errors["url"] = ["A registry's URL is http:// or https:// and a host, e.g. http://registry:8081."]
        elif self.url and "@" in urlsplit(self.url).netloc:
            errors["url"] = [
                "A registry's URL carries no credentials (user:password@): give them as the Authorization header."
            ]
        if not self.is_registry:
            if self.url:
                errors["url"] = ["An inline catalog keeps its schemas here: it has no URL."]
            if self.auth:
                errors["auth"] = ["An inline catalog has no registry to send an Authorization header to."]
        if any(c in self.auth for c in "\r\n\x00"):
            errors["auth"] = ["A header value is one line."]
        if errors:
            raise ValidationError(errors)


def origin(url: str) -> tuple[str, str, int | None] | None:
    """A URL's scheme, host and port (the scheme's default when it names none); None for no URL or a bad one."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def same_origin(before: str, after: str) -> bool:
    """Whether a catalog's Authorization header, given for `before`, may still go to `after`."""
    return origin(before) is not None and origin(before) == origin(after)


def redacted_url(url: str) -> str:
    """`url` with its user info, if any, as `***`: how a URL saved before such URLs were refused is shown."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a port that is not a number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in url)


class InlineSchema(models.Model):
    """One version of a subject's schema in an inline catalog."""

    class Format(models.TextChoices):
        AVRO = AVRO, "avro"
        PROTOBUF = PROTOBUF, "protobuf (a .proto)"
        JSON = JSON, "json (a JSON Schema)"

    catalog = models.ForeignKey(Catalog, on_delete=models.CASCADE, related_name="schemas")
    subject = models.CharField(max_length=255, help_text="e.g. orders-value; may hold * wildcards (*-value).")
    version = models.PositiveIntegerField(default=1)
    format = models.CharField(max_length=16, choices=Format.choices)
    text = models.TextField("schema", help_text="The Avro schema (JSON), the .proto, or the JSON Schema.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["subject", "version"]
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["catalog", "subject", "version"], name="inline_schema_version_once")
        ]

    def __str__(self) -> str:
        return f"{self.subject} v{self.version}"

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.subject and not SUBJECT.fullmatch(self.subject):
            errors["subject"] = ["A subject has letters, digits, '.', '_', '-' and * wildcards."]
        if self.version is not None and self.version < 1:
            errors["version"] = ["Versions count from 1."]
        if self.text and self.format in self.Format.values:
            problems = check_schema(self.format, self.text)
            if problems:
                errors["text"] = problems
        if errors:
            raise ValidationError(errors)


def subject_matches(held: str, wanted: str) -> bool:
    """Whether an inline subject (may hold `*`) holds the subject `wanted`."""
    return held == wanted or ("*" in held and fnmatch.fnmatchcase(wanted, held))


def topic_specificity(pattern: str) -> tuple[int, int, str]:
    """A sort key, most specific first: exact names before patterns, then more literal characters first, then
    by the pattern's text (so the order is total and every process picks the same)."""
    return ("*" in pattern, -len(pattern.replace("*", "")), pattern)


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether the topic pattern (`*` matches any run of characters, none included) covers `topic`."""
    return pattern == topic or ("*" in pattern and fnmatch.fnmatchcase(topic, pattern))


_TEMPLATE_EXPRESSION = re.compile(r"\$\{[^}]*\}")


def topic_glob(topic: str) -> str:
    """The topics a route's topic template can render, as a pattern: each placeholder becomes `*`."""
    return _TEMPLATE_EXPRESSION.sub("*", topic)


def covers(pattern: str, glob: str) -> bool:
    """Whether a topic pattern covers every topic `glob` stands for: the glob's `*` can only be met by one of the
    pattern's (fnmatch reads the glob's `*` as a character, which only the pattern's `*` matches)."""
    return pattern == glob or ("*" in pattern and fnmatch.fnmatchcase(glob, pattern))


class TopicModel(models.Model):
    """How the keys and values of the topics `topic` covers are encoded, and where their schemas are."""

    class Model(models.TextChoices):
        AVRO = AVRO
        PROTOBUF = PROTOBUF
        JSON = JSON
        STRING = "string"
        INT32 = "int32"
        INT64 = "int64"
        FLOAT = "float"
        DOUBLE = "double"

    class Strategy(models.TextChoices):
        TOPIC = "topic", "topic: subject <topic>-key or <topic>-value"
        ID = "id", "id: the schema with this id (a registry's)"
        SUBJECT = "subject", "subject: the schema of this subject and version"

    topic = models.CharField(
        max_length=MAX_TOPIC, unique=True, help_text="A Kafka topic name; * matches any run of characters (orders-*)."
    )
    key_model = models.CharField(max_length=16, choices=Model.choices, blank=True, help_text="Empty: raw bytes.")
    key_catalog = models.ForeignKey(
        Catalog, on_delete=models.PROTECT, null=True, blank=True, related_name="key_topic_models"
    )
    key_strategy = models.CharField(max_length=16, choices=Strategy.choices, blank=True)
    key_schema_id = models.PositiveIntegerField("key schema id", null=True, blank=True)
    key_subject = models.CharField(max_length=255, blank=True)
    key_version = models.CharField(max_length=16, blank=True, help_text="latest (empty) or a version number.")
    key_record = models.CharField(max_length=255, blank=True, help_text="Protobuf: the message's (full) name.")
    key_encoding = models.CharField(max_length=32, blank=True, help_text="string: the text's encoding (utf_8).")
    value_model = models.CharField(max_length=16, choices=Model.choices, blank=True, help_text="Empty: raw bytes.")
    value_catalog = models.ForeignKey(
        Catalog, on_delete=models.PROTECT, null=True, blank=True, related_name="value_topic_models"
    )
    value_strategy = models.CharField(max_length=16, choices=Strategy.choices, blank=True)
    value_schema_id = models.PositiveIntegerField("value schema id", null=True, blank=True)
    value_subject = models.CharField(max_length=255, blank=True)
    value_version = models.CharField(max_length=16, blank=True, help_text="latest (empty) or a version number.")
    value_record = models.CharField(max_length=255, blank=True, help_text="Protobuf: the message's (full) name.")
    value_encoding = models.CharField(max_length=32, blank=True, help_text="string: the text's encoding (utf_8).")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["topic"]

    def __str__(self) -> str:
        return self.topic

    def side(self, side: str) -> dict[str, Any]:
        """The key's or value's fields, by their short names (model, catalog, strategy, ...)."""
        names = ("model", "catalog", "strategy", "schema_id", "subject", "version", "record", "encoding")
        return {name: getattr(self, f"{side}_{name}") for name in names}

    def fill_defaults(self) -> None:
        """What a side leaves out, filled in, so that one model is stored one way however it was written: the
        strategy inferred from an id or a subject (else topic), version latest, a string's encoding utf_8."""
        for side in SIDES:
            fields = self.side(side)
            if fields["catalog"] is not None and not fields["strategy"]:
                strategy = "id" if fields["schema_id"] is not None else "subject" if fields["subject"] else "topic"
                setattr(self, f"{side}_strategy", strategy)
            if fields["catalog"] is not None and not fields["version"] and getattr(self, f"{side}_strategy") != "id":
                setattr(self, f"{side}_version", LATEST)
            if fields["model"] == self.Model.STRING and not fields["encoding"]:
                setattr(self, f"{side}_encoding", DEFAULT_ENCODING)

    def clean(self) -> None:
        self.fill_defaults()
        errors: dict[str, list[str]] = {}
        if self.topic and not TOPIC_PATTERN.fullmatch(self.topic):
            errors["topic"] = ["A topic has 1 to 249 letters, digits, '.', '_', '-', and * for any run of them."]
        elif self.topic in (".", ".."):
            errors["topic"] = [f"Kafka does not allow a topic named {self.topic!r}."]
        for side in SIDES:
            for field, message in side_problems(side, self.side(side), self.topic):
                errors.setdefault(f"{side}_{field}", []).append(message)
        if not self.key_model and not self.value_model and not errors:
            errors["value_model"] = ["Give the key's model, the value's, or both."]
        if errors:
            raise ValidationError(errors)


_NUMBERS = ("int32", "int64", "float", "double")


def side_problems(side: str, fields: dict[str, Any], topic: str) -> list[tuple[str, str]]:
    """(field, message) for each problem of a key's or value's model; `fields` as `TopicModel.side` gives."""
    model, catalog = fields["model"], fields["catalog"]
    found: list[tuple[str, str]] = []
    if not model:
        found.extend(
            (name, f"The {side} has no model: give its model first.")
            for name in ("catalog", "strategy", "schema_id", "subject", "version", "record", "encoding")
            if fields[name] not in (None, "")
        )
        return found
    if model == "string":
        if problem := encoding_problem(fields["encoding"] or DEFAULT_ENCODING):
            found.append(("encoding", problem))
    elif fields["encoding"]:
        found.append(("encoding", "Only a string model has an encoding."))
    if model == "string" or model in _NUMBERS:
        if catalog is not None:
            found.append(("catalog", f"A {model} {side} needs no schema: leave the catalog empty."))
        found.extend(
            (name, f"A {model} {side} needs no schema.")
            for name in ("strategy", "schema_id", "subject", "version", "record")
            if fields[name] not in (None, "")
        )
        return found
    if catalog is None:
        if model != JSON:
            found.append(("catalog", f"An {model} {side} needs the catalog its schema is in."))
        found.extend(
            (name, "Without a catalog there is no schema to choose.")
            for name in ("strategy", "schema_id", "subject", "version")
            if fields[name] not in (None, "")
        )
    else:
        found.extend(_schema_choice_problems(side, fields, catalog, topic))
    if fields["record"] and model != PROTOBUF:
        found.append(("record", "Only a protobuf model names a record (its message)."))
    return found


def _schema_choice_problems(side: str, fields: dict[str, Any], catalog: Catalog, topic: str) -> list[tuple[str, str]]:
    strategy, version = fields["strategy"] or TopicModel.Strategy.TOPIC, fields["version"] or LATEST
    found: list[tuple[str, str]] = []
    if version != LATEST and not (version.isdigit() and int(version) >= 1):
        found.append(("version", f"A version is latest or a number from 1, not {version!r}."))
    if strategy == TopicModel.Strategy.ID:
        if fields["schema_id"] is None:
            found.append(("schema_id", "Give the schema's id."))
        if catalog.kind == Catalog.Kind.INLINE:
            found.append(("strategy", "Schema ids are a registry's: an inline catalog has subjects and versions."))
        found.extend(
            (name, "A schema chosen by id has no subject or version.")
            for name in ("subject", "version")
            if fields[name]
        )
        return found
    if fields["schema_id"] is not None:
        found.append(("schema_id", "An id chooses the schema by itself: set the strategy to id."))
    if strategy == TopicModel.Strategy.SUBJECT and not fields["subject"]:
        found.append(("subject", "Give the subject."))
    if strategy == TopicModel.Strategy.TOPIC and fields["subject"]:
        found.append(("subject", f"The topic strategy reads subject <topic>-{side}: set the strategy to subject."))
    if catalog.kind != Catalog.Kind.INLINE or found:
        return found
    subject = fields["subject"] if strategy == TopicModel.Strategy.SUBJECT else f"{topic}-{side}"
    if strategy == TopicModel.Strategy.TOPIC and "*" in topic:
        return found  # which topics the pattern covers is known only when they are read
    chosen = held_schema(list(catalog.schemas.all()), subject, version)
    where = "subject" if strategy == TopicModel.Strategy.SUBJECT else "strategy"
    if chosen is None:
        if not any(subject_matches(s.subject, subject) for s in catalog.schemas.all()):
            found.append((where, f"Catalog {catalog.name} holds no subject {subject!r}."))
        else:
            found.append(("version", f"Catalog {catalog.name} holds no version {version} of subject {subject!r}."))
    elif chosen.format != fields["model"]:
        found.append((where, f"Subject {chosen.subject!r} holds a {chosen.format} schema, not {fields['model']}."))
    elif fields["record"] and chosen.format == PROTOBUF and fields["record"] not in (proto_messages(chosen.text) or ()):
        found.append(("record", f"The .proto of {chosen.subject!r} declares no message {fields['record']!r}."))
    return found


def held_schema(schemas: list[InlineSchema], subject: str, version: str = LATEST) -> InlineSchema | None:
    """The inline schema that `subject` at `version` (latest or a number) reads: the subject held exactly, else
    the most specific wildcard subject that matches (as topic patterns); None if there is none."""
    subjects = sorted({s.subject for s in schemas if subject_matches(s.subject, subject)}, key=topic_specificity)
    if not subjects:
        return None
    versions = [s for s in schemas if s.subject == subjects[0]]
    if version == LATEST:
        return max(versions, key=lambda s: s.version)
    return next((s for s in versions if s.version == int(version)), None)
