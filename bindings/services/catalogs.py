"""Write functions for catalogs and topic models (`bindings.services` re-exports them).

Errors are keyed like the API's fields: a catalog's `name`, `kind`, `url`, `auth`, `max_age_s`, and
`subjects.<subject>.schema` / `.format` / `.version` for its inline schemas; a topic model's `topic`, and
`key.<field>` / `value.<field>` (`value.catalog`, `value.subject`, `value.id`, ...) for its models.

A catalog's `auth` (an Authorization header) is write-only: the history records whether one is set and when it
was last set (`auth_updated`), so a change of credentials is announced and recorded without the secret. The
header belongs to the registry it was given for: a write that moves the catalog's URL to another scheme, host or
port removes it unless the same write gives one, and the history shows it gone (`auth_set` false).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from bindings.history import CATALOG, SHELL, TOPIC_MODEL, Actor, object_state, record
from bindings.models import DEFAULT_MAX_AGE_S, Catalog, InlineSchema, TopicModel
from bindings.models.catalogs import SIDES, same_origin
from bindings.services.checks import Errors, add, check_shape, collect
from bindings.shapes import CatalogShape, TopicModelShape

_SIDE_FIELDS = {"schema_id": "id"}  # a model's field -> its name in the API, where they differ


def _users(catalog: Catalog) -> list[TopicModel]:
    found = TopicModel.objects.filter(Q(key_catalog=catalog) | Q(value_catalog=catalog)).distinct()
    return list(found.select_related("key_catalog", "value_catalog").order_by("topic"))


@transaction.atomic
def do_put_catalog(
    *,
    name: str,
    kind: str = Catalog.Kind.INLINE,
    url: str | None = "",
    auth: str | None = None,
    max_age_s: int = DEFAULT_MAX_AGE_S,
    subjects: Mapping[str, Mapping[str, Any]] | None = None,
    actor: Actor = SHELL,
) -> Catalog:
    """Create or replace the catalog called `name` (idempotent).

    `auth` None keeps the current header while the URL stays at the same scheme, host and port (it is removed
    otherwise: credentials go to the registry they were given for), "" removes it. `subjects` (inline only) maps
    each subject to its `format`, `schema` and optional `version`: a text that differs from the subject's latest
    becomes its next version (or the version given), the older versions stay; a subject left out is removed with
    its versions. Topic models that name the catalog must still find what they name.
    """
    subjects = {} if subjects is None else subjects
    given = {"name": name, "kind": kind, "url": url, "max_age_s": max_age_s, "subjects": subjects}
    check_shape(CatalogShape, given if auth is None else {**given, "auth": auth})
    catalog = Catalog.objects.select_for_update().filter(name=name).first() or Catalog(name=name)
    before = object_state(CATALOG, name) if catalog.pk is not None else None
    if auth is None and catalog.auth and not same_origin(catalog.url, url or ""):
        auth = ""
    catalog.kind, catalog.url, catalog.max_age_s = kind, url or "", max_age_s
    if auth is not None and auth != catalog.auth:
        catalog.auth, catalog.auth_updated = auth, timezone.now()
    errors: Errors = {}
    try:
        catalog.full_clean()
    except ValidationError as exc:
        collect(errors, exc, "")
    existing = list(catalog.schemas.all()) if catalog.pk is not None else []
    if catalog.is_registry and subjects:
        add(errors, "subjects", "A registry catalog's subjects are in its registry: give none here.")
    added = [
        row
        for subject, spec in subjects.items()
        if (row := _new_version(catalog, str(subject), spec, existing, errors)) is not None
    ]
    if errors:
        raise ValidationError(errors)
    catalog.save()
    for row in added:
        row.catalog = catalog
    InlineSchema.objects.bulk_create(added)
    catalog.schemas.exclude(subject__in=list(subjects)).delete()
    for topic_model in _users(catalog):
        try:
            topic_model.full_clean()
        except ValidationError as exc:
            where = "kind" if before is not None and before["kind"] != kind else "subjects"
            add(errors, where, [f"Topic model {topic_model.topic}: {message}" for message in exc.messages])
    if errors:
        raise ValidationError(errors)  # rolls back: the topic models keep what they name
    record(CATALOG, name, before, object_state(CATALOG, name), actor)
    return catalog


def _new_version(
    catalog: Catalog, subject: str, spec: Mapping[str, Any], existing: list[InlineSchema], errors: Errors
) -> InlineSchema | None:
    """The subject's new version, or None when the text is one the subject holds (or has errors, added)."""
    where = f"subjects.{subject}"
    schema_format, text, version = spec["format"], spec["schema"], spec.get("version")
    versions = {row.version: row for row in existing if row.subject == subject}
    latest = max(versions, default=0)
    if version is None and latest and (versions[latest].format, versions[latest].text) == (schema_format, text):
        return None
    if version is not None and version in versions:
        if (versions[version].format, versions[version].text) == (schema_format, text):
            return None
        add(errors, f"{where}.version", f"Version {version} holds another schema: leave the version out to save "
            f"this one as version {latest + 1}.")  # fmt: skip
        return None
    if version is not None and version < latest:
        add(errors, f"{where}.version", f"Versions only grow: the subject's latest is {latest}.")
        return None
    row = InlineSchema(catalog=catalog, subject=subject, format=schema_format, text=text, version=version or latest + 1)
    try:
        row.full_clean(exclude=["catalog"])
    except ValidationError as exc:
        collect(errors, exc, where, {"text": "schema"})
        if "subject" in exc.message_dict:  # the subject's name is the key: its error is the key's
            errors[where] = errors.pop(f"{where}.subject")
        return None
    return row


@transaction.atomic
def do_delete_catalog(name: str, *, actor: Actor = SHELL) -> bool:
    """Delete the catalog called `name` unless a topic model names it; False if there was none."""
    catalog = Catalog.objects.select_for_update().filter(name=name).first()
    if catalog is None:
        return False
    users = _users(catalog)
    if users:
        topics = ", ".join(topic_model.topic for topic_model in users)
        raise ValidationError({"name": [f"Topic models name this catalog: {topics}. Change or delete them first."]})
    before = object_state(CATALOG, name)
    catalog.delete()
    record(CATALOG, name, before, None, actor)
    return True


@transaction.atomic
def do_put_topic_model(
    *,
    topic: str,
    key: Mapping[str, Any] | None = None,
    value: Mapping[str, Any] | None = None,
    actor: Actor = SHELL,
) -> TopicModel:
    """Create or replace the models of the topics `topic` covers (idempotent); each side as the API writes it
    (`ModelShape`), None for raw bytes. What a side leaves out is filled in (`TopicModel.fill_defaults`)."""
    check_shape(TopicModelShape, {"topic": topic, "key": key, "value": value})
    topic_model = TopicModel.objects.select_for_update().filter(topic=topic).first() or TopicModel(topic=topic)
    before = object_state(TOPIC_MODEL, topic) if topic_model.pk is not None else None
    errors: Errors = {}
    for side, spec in (("key", key), ("value", value)):
        for field, side_value in _side_fields(side, spec or {}, errors).items():
            setattr(topic_model, f"{side}_{field}", side_value)
    if errors:
        raise ValidationError(errors)
    try:
        topic_model.full_clean()
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            side, _, short = field.partition("_")
            add(errors, f"{side}.{_SIDE_FIELDS.get(short, short)}" if side in SIDES else field, messages)
        raise ValidationError(errors) from None
    topic_model.save()
    record(TOPIC_MODEL, topic, before, object_state(TOPIC_MODEL, topic), actor)
    return topic_model


def _side_fields(side: str, spec: Mapping[str, Any], errors: Errors) -> dict[str, Any]:
    """A side's model fields from its API form (the model's `fill_defaults` fills in what it leaves out)."""
    catalog = None
    if spec.get("catalog"):
        catalog = Catalog.objects.filter(name=spec["catalog"]).first()
        if catalog is None:
            add(errors, f"{side}.catalog", f"There is no catalog named {spec['catalog']!r}.")
    return {
        "model": spec.get("model") or "",
        "catalog": catalog,
        "strategy": spec.get("strategy") or "",
        "schema_id": spec.get("id"),
        "subject": spec.get("subject") or "",
        "version": str(spec.get("version") or ""),
        "record": spec.get("record") or "",
        "encoding": spec.get("encoding") or "",
    }


@transaction.atomic
def do_delete_topic_model(topic: str, *, actor: Actor = SHELL) -> bool:
    """Delete the topic model of `topic` (its pattern, exactly); False if there was none."""
    before = object_state(TOPIC_MODEL, topic)
    deleted, _ = TopicModel.objects.filter(topic=topic).delete()
    record(TOPIC_MODEL, topic, before, None, actor)
    return deleted > 0
