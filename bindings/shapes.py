"""The JSON form of each configuration object, declared once: route, filter, endpoint, guard, revocation, catalog
and topic model.

A shape says which keys an object has and what type each value is, and refuses any other key (`Shape`): a typo
is named, never dropped. What the values mean (a topic Kafka accepts, a path pattern, a key that is public) is the
model's `clean()`. `bindings.services` checks every write against its shape and then its model, so the API, the
admin, both importers and the shell get the same answers; the API's serializers are these shapes (so the OpenAPI
schema documents them) and leave the checking to the services.

`unknown_keys` words the refusal of a key, for the importers too, so a misspelt key reads the same from the API, a
zilla.yaml or an AsyncAPI document. `problems(shape, prefix)` runs a shape and names each bad key the way the
services do (`filters[0].key`, `cors_origins[1]`, `filters[0].kee`), for a `ValidationError` whose
`message_dict` the API and the importers place.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from bindings.models import LATEST, Catalog, InlineSchema, Route, TopicModel
from bindings.models.configuration import MAX_CONFLATE_MS

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

MAX_INT = 2**31 - 1  # Postgres integer

Errors = dict[str, list[str]]


class Text(serializers.CharField):
    """A string and nothing else (DRF's CharField turns numbers into strings), kept as given."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class JsonObject(serializers.DictField):
    """An object JSON, and so Postgres, can hold: no NaN or infinity (JSON's `1e400` reads as one, YAML has
    `.inf`), nothing JSON has no type for (YAML's dates, bytes and sets)."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "not_json": "Holds a value JSON cannot: NaN, infinity, a date, bytes or a set."
    }

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value: dict[str, Any] = super().to_internal_value(data)
        try:
            json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError):
            self.fail("not_json")
        return value


def unknown_keys(given: Iterable[object], known: Sequence[str]) -> Errors:
    """Each key of `given` that `known` lacks -> why it is refused: the known key it is closest to, if one is
    ("did you mean `guarded`?"), else every known key. The API's shapes and both importers refuse unknown keys with
    these messages, each under its own key, so a typo is named where it is (`filters[0].kee`)."""
    found: Errors = {}
    for key in given:
        name = str(key)
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(known)}."
        found[name] = [f"Unknown field; {hint}"]
    return found


class Shape(serializers.Serializer[Any]):
    """An object of the declared fields only: another is refused under its own name (a typo of `guarded` would
    otherwise be dropped, and the route served to anyone). Read-only fields are declared, so a GET's body is
    accepted back; DRF ignores their values."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: Errors = {}
        if isinstance(data, Mapping):
            writable = [name for name, field in self.fields.items() if not field.read_only]
            unknown = unknown_keys((key for key in data if key not in self.fields), writable)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, Mapping):  # every problem of the object at once
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class FilterValueShape(Shape):
    """A filter's value condition: the JSON value at `path` must equal `equals` (a string, may be templated)."""

    # DRF formats this message (with the type it got): braces are doubled.
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": 'A value filter is an object, e.g. {{"path": "status", "equals": "open"}}.'
    }
    path = Text(
        allow_blank=True,  # the model names an empty path with the filter's other problems
        error_messages={
            "invalid": "The value's path is a string.",
            "required": "A value filter needs the path of the value to compare.",
        },
        help_text="Dotted path into the message's JSON value, e.g. status or item.status.",
    )
    equals = Text(
        allow_blank=True,
        required=False,
        error_messages={"invalid": "The value's equals is a string."},
        help_text="The string the value must equal; may use ${params.name}.",
    )

    class Meta:
        ref_name = "FilterValue"


class FilterShape(Shape):
    """A route filter: a message passes if its key, every header, the value condition and the expression all match."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": "A filter is an object with a key, headers and/or a value."
    }
    key = Text(
        allow_null=True,
        allow_blank=True,
        required=False,
        error_messages={"invalid": "A key is a string, or null for any key."},
        help_text="Message key (may use ${params.name}); null: any key.",
    )
    headers = serializers.JSONField(
        required=False,
        help_text='Header name -> value (strings), e.g. {"tag": "x"}; checked by the filter model.',
    )
    value = FilterValueShape(allow_null=True, required=False, help_text="A condition on the JSON value.")
    expression = Text(
        allow_blank=True,
        required=False,
        error_messages={"invalid": "An expression is a string of CEL."},
        help_text=(
            "A CEL expression that must be true for the message to pass, e.g. value.order.total > 100.0 && "
            "value.region == params.region. It reads value and key (decoded JSON), headers, params and guarded "
            "(each guard's identity and attributes); a syntax or type error is refused when the route is saved."
        ),
    )

    class Meta:
        ref_name = "FilterSpec"  # its name in the OpenAPI schema


class RouteShape(Shape):
    """A route: its name, where it is served, what it reads and how it streams."""

    name = serializers.SlugField(max_length=100, required=False)
    position = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False)
    endpoint = serializers.SlugField(max_length=100, required=False)
    topic = Text(required=False)
    paths = serializers.ListField(child=Text(), required=False)
    path = Text(write_only=True, required=False)
    filters = serializers.ListField(
        child=serializers.JSONField(), required=False, help_text="Each a filter (FilterShape), checked one by one."
    )
    event_id = serializers.ChoiceField(choices=Route.EventId.choices, required=False)
    start = serializers.ChoiceField(choices=Route.Start.choices, required=False)
    caught_up = serializers.BooleanField(required=False)
    slow_client = serializers.ChoiceField(choices=Route.SlowClient.choices, required=False)
    guarded = serializers.DictField(
        child=serializers.ListField(child=Text()),
        required=False,
        help_text="Guard name -> the roles a token must all have; every guard must authorise.",
    )
    # DRF takes declared fields off the class, so this one does not hide `Serializer.fields`; mypy cannot know.
    fields = serializers.ListField(  # type: ignore[assignment]
        child=Text(),
        required=False,
        help_text=(
            "JSON Pointers (e.g. /price, /item/name): only those parts of each JSON value are sent, nested shape "
            "kept; a client may ask for fewer with ?fields=. Empty: the whole value."
        ),
    )

    conflate_ms = serializers.IntegerField(
        min_value=0,
        max_value=MAX_CONFLATE_MS,
        required=False,
        help_text=(
            "Milliseconds: each stream gets at most one event per key in this interval, the latest value of that "
            "key (0: every event); a client may ask a longer interval with ?conflate_ms=."
        ),
    )


class EndpointShape(Shape):
    """An endpoint: what every stream served under it is told (retry, keep-alive) and which origins may read."""

    name = serializers.SlugField(max_length=100, required=False)
    retry_ms = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False)
    keepalive_s = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False)
    cors_origins = serializers.ListField(child=Text(max_length=255), required=False)
    cors_credentials = serializers.BooleanField(required=False)
    max_streams_per_client = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False, allow_null=True)
    max_streams_per_identity = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False, allow_null=True)


class GuardShape(Shape):
    """A JWT guard: whose tokens it accepts, with which keys, and which claims carry roles and identity."""

    name = serializers.SlugField(max_length=100, required=False)
    issuer = Text(max_length=255, required=False, allow_blank=True)
    audience = Text(max_length=255, required=False, allow_blank=True)
    keys = serializers.ListField(
        child=JsonObject(), required=False, help_text="Public keys: a JWKS list of JWK objects."
    )
    jwks_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    roles_claim = Text(max_length=255, required=False)
    identity_claim = Text(max_length=255, required=False)
    attributes = serializers.DictField(child=Text(), required=False)
    challenge_s = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False)
    cookie = Text(max_length=255, required=False, allow_blank=True)
    allow_tokens_without_exp = serializers.BooleanField(
        required=False, help_text="Accept tokens without an `exp` claim (default false: they are refused)."
    )


class RevocationShape(Shape):
    """A revocation: a guard's tokens of one identity, or one token (`jti`), refused until `until`."""

    id = serializers.IntegerField(read_only=True)
    guard = serializers.SlugField(max_length=100, required=False, help_text="The guard whose tokens are revoked.")
    identity = Text(
        max_length=255, required=False, allow_blank=True, help_text="Every token of this identity; or give a jti."
    )
    jti = Text(max_length=255, required=False, allow_blank=True, help_text="One token, by its jti claim.")
    until = serializers.DateTimeField(required=False, help_text="When the revocation lapses (ISO 8601).")
    reason = Text(required=False, allow_blank=True, help_text="Why, for the operators; never sent to clients.")
    created_by = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class InlineSubjectShape(Shape):
    """A subject of an inline catalog, as written: its schema's format and text (a new text is a new version)."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": 'A subject is an object, e.g. {{"format": "avro", "schema": "..."}}.'
    }
    format = serializers.ChoiceField(choices=InlineSchema.Format.choices, help_text="avro, protobuf or json.")
    schema = Text(help_text="The Avro schema (JSON text), the .proto, or the JSON Schema (JSON text).")
    version = serializers.IntegerField(
        min_value=1,
        max_value=MAX_INT,
        required=False,
        allow_null=True,
        help_text="Leave out: a new text becomes the next version. Given: the version this text is (or becomes).",
    )

    class Meta:
        ref_name = "InlineSubject"


class InlineSchemaShape(Shape):
    """One version of a subject's schema, as the API shows every version an inline catalog keeps."""

    subject = serializers.CharField(read_only=True)
    version = serializers.IntegerField(read_only=True)
    format = serializers.CharField(read_only=True)
    schema = serializers.CharField(read_only=True)

    class Meta:
        ref_name = "InlineSchemaVersion"


class CatalogShape(Shape):
    """A catalog of schemas: inline (its subjects here) or a Confluent-compatible registry (`url`, `auth`)."""

    name = serializers.SlugField(max_length=100, required=False)
    kind = serializers.ChoiceField(choices=Catalog.Kind.choices, required=False)
    url = Text(max_length=500, required=False, allow_blank=True, allow_null=True, help_text="A registry's URL.")
    auth = Text(
        max_length=2000,
        write_only=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="The Authorization header for the registry; write-only. Left out: kept; null or empty: removed.",
    )
    auth_set = serializers.BooleanField(read_only=True, help_text="Whether an Authorization header is set.")
    auth_updated = serializers.DateTimeField(read_only=True, allow_null=True, help_text="When it was last set.")
    max_age_s = serializers.IntegerField(
        min_value=0, max_value=MAX_INT, required=False, help_text="Seconds a registry's schema is cached."
    )
    subjects = serializers.DictField(
        child=InlineSubjectShape(),
        required=False,
        help_text="Inline only: subject -> its latest schema. A subject left out is removed, with its versions.",
    )
    schemas = InlineSchemaShape(many=True, read_only=True, help_text="Every version kept, oldest first.")


@extend_schema_field({"oneOf": [{"type": "string", "enum": [LATEST]}, {"type": "integer", "minimum": 1}]})
class VersionField(serializers.Field):  # type: ignore[type-arg]
    """A schema version: `latest` or a number from 1."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": "A version is latest or a number from 1."}

    def to_internal_value(self, data: Any) -> str:
        if data == LATEST:
            return LATEST
        if isinstance(data, bool) or not isinstance(data, int | str) or not str(data).isdigit() or int(data) < 1:
            self.fail("invalid")
        return str(int(data))

    def to_representation(self, value: Any) -> Any:
        return value


class ModelShape(Shape):
    """How a topic's keys or values are encoded (Zilla's `model`), and which schema of which catalog reads them."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": 'A model is an object, e.g. {{"model": "avro", "catalog": "schemas"}}.'
    }
    model = serializers.ChoiceField(choices=TopicModel.Model.choices)
    catalog = serializers.SlugField(max_length=100, required=False, allow_null=True, help_text="The catalog's name.")
    strategy = serializers.ChoiceField(
        choices=TopicModel.Strategy.choices,
        required=False,
        allow_null=True,
        help_text="topic (the default), id or subject; inferred from id or subject when left out.",
    )
    id = serializers.IntegerField(
        min_value=1, max_value=MAX_INT, required=False, allow_null=True, help_text="A registry's schema id."
    )
    subject = Text(max_length=255, required=False, allow_null=True, allow_blank=True)
    version = VersionField(required=False, allow_null=True, help_text="latest (the default) or a number.")
    record = Text(max_length=255, required=False, allow_null=True, allow_blank=True, help_text="Protobuf message.")
    encoding = Text(max_length=32, required=False, allow_null=True, allow_blank=True, help_text="string: utf_8.")

    class Meta:
        ref_name = "MessageModel"


class TopicModelShape(Shape):
    """The models of the topics `topic` covers (`*` matches any run of characters): key, value, or both."""

    topic = Text(max_length=249, required=False, help_text="A Kafka topic name, or a pattern such as orders-*.")
    key = ModelShape(required=False, allow_null=True, help_text="The key's model; null: raw bytes.")
    value = ModelShape(required=False, allow_null=True, help_text="The value's model; null: raw bytes.")


def problems(shape: serializers.Serializer[Any], prefix: str = "") -> Errors:
    """What is wrong with the data `shape` was given, keyed as the services key errors (`filters[0].value.path`);
    empty if it fits."""
    if shape.is_valid():
        return {}
    found: Errors = {}
    _flatten(shape.errors, prefix, found)
    return found


def _flatten(detail: Any, where: str, found: Errors) -> None:
    if isinstance(detail, Mapping):
        for key, inner in detail.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                _flatten(inner, where, found)
            elif isinstance(key, int):
                _flatten(inner, f"{where}[{key}]", found)
            else:
                _flatten(inner, f"{where}.{key}" if where else str(key), found)
    elif isinstance(detail, list) and any(isinstance(item, Mapping | list) for item in detail):
        for index, inner in enumerate(detail):  # a list of nested errors: one per item, empty where it fits
            if inner:
                _flatten(inner, f"{where}[{index}]", found)
    elif isinstance(detail, list):
        found.setdefault(where, []).extend(str(message) for message in detail)
    else:
        found.setdefault(where, []).append(str(detail))
