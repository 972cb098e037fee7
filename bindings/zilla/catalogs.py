"""A zilla.yaml's `catalogs` and its kafka bindings' topic models, read into plans and written back.

Import:
- each `catalogs:` entry of type `inline` becomes an inline catalog: `options.subjects: {subject: {schema,
  version}}`, each subject's text saved as its next version (or as the version given, a number; `latest` is the
  next). Zilla does not say a subject's format: it is the model of the topics that read the subject, else what
  the text is (JSON that fastavro parses: Avro; other JSON: a JSON Schema; anything else: a .proto). Our export
  writes `format` (an extension) only where that guess would be wrong;
- `schema-registry` (and Zilla Plus' `confluent-schema-registry`), `karapace` (`karapace-schema-registry`) and
  `apicurio` (`apicurio-registry`) become registry catalogs read through their Confluent-compatible API, with
  `options.url` and `options.max-age`; a context other than `default` and Apicurio's own options are noted as
  ignored. Zilla has no place for a registry's credentials: a catalog's Authorization header keeps its value
  while the URL keeps its scheme, host and port, and is removed when it moves (`do_put_catalog`); a URL with
  credentials in it (`user:pass@`) is refused at `options.url`;
- each `options.topics[]` entry of a `kafka` binding with a `key` or `value` model becomes a topic model (its
  `name` is the topic or a pattern with `*`): `model`, `view: json` (the only view: events are JSON), `encoding`
  for strings, and `catalog: {<name>: [{strategy: topic, version} | {id} | {subject, version}]}`, one catalog
  and one entry, with `record` for protobuf. The same topic in several kafka bindings (a cache client and its
  server) must say the same.

Export writes them back the same way, the catalogs' latest versions only (Zilla keeps one per subject), never a
registry's Authorization header nor the user info of a URL saved before such URLs were refused; the notes say
what was left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bindings.models import LATEST, Catalog, TopicModel
from bindings.models.catalogs import redacted_url, subject_matches
from bindings.representations import model_representation
from bindings.schemas import AVRO, JSON, PROTOBUF, check_schema
from bindings.zilla.plan import _NamedPlan, _Plan, _unknown

REGISTRY_TYPES = {
    "schema-registry": "schema-registry",
    "confluent-schema-registry": "schema-registry",
    "karapace": "karapace",
    "karapace-schema-registry": "karapace",
    "apicurio": "apicurio",
    "apicurio-registry": "apicurio",
}
_APICURIO_OPTIONS = frozenset({"group-id", "use-id", "id-encoding"})
_REGISTRY_OPTIONS = frozenset({"url", "max-age", "context"}) | _APICURIO_OPTIONS
_SUBJECT_KEYS = frozenset({"schema", "version", "format"})
_MODEL_KEYS = frozenset({"model", "view", "catalog", "encoding", "record"})
_ENTRY_KEYS = frozenset({"strategy", "version", "id", "subject", "record"})


def plan_catalogs(plan: _Plan, catalogs: Any) -> None:
    if catalogs is None:
        return
    if not isinstance(catalogs, Mapping):
        plan.error("catalogs", "`catalogs` is a mapping of catalog name -> catalog.")
        return
    for name, catalog in catalogs.items():
        where = f"catalogs.{name}"
        if not isinstance(catalog, Mapping) or not isinstance(catalog.get("type"), str):
            plan.error(where, "A catalog is a mapping with a type (inline, schema-registry, ...) and options.")
            continue
        _unknown(plan, where, catalog, frozenset({"type", "options"}))
        kind, options = catalog["type"], catalog.get("options") or {}
        if not isinstance(options, Mapping):
            plan.error(f"{where}.options", "Options are a mapping.")
            continue
        if kind == "inline":
            _plan_inline(plan, str(name), where, options)
        elif kind in REGISTRY_TYPES:
            _plan_registry(plan, str(name), where, REGISTRY_TYPES[kind], options)
        else:
            plan.ignored.append(f"catalog {name} ({kind}): ignored, only inline and registry catalogs are imported")


def _plan_inline(plan: _Plan, name: str, where: str, options: Mapping[str, Any]) -> None:
    _unknown(plan, f"{where}.options", options, frozenset({"subjects"}))
    subjects = options.get("subjects") or {}
    if not isinstance(subjects, Mapping):
        plan.error(f"{where}.options.subjects", "Subjects are a mapping of subject -> {schema, version}.")
        return
    found: dict[str, dict[str, Any]] = {}
    for subject, spec in subjects.items():
        at = f"{where}.options.subjects.{subject}"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), str):
            plan.error(f"{at}.schema", "A subject needs its schema, as text.")
            continue
        _unknown(plan, at, spec, _SUBJECT_KEYS)
        version = spec.get("version", LATEST)
        if isinstance(version, str) and version.isdigit():
            version = int(version)
        if version != LATEST and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            plan.error(f"{at}.version", f"A version is latest or a number from 1, not {version!r}.")
            continue
        found[str(subject)] = {
            "schema": spec["schema"],
            "version": None if version == LATEST else version,
            "format": spec.get("format"),
        }
    plan.catalogs.append(_NamedPlan(where=where, name=name, fields={"kind": "inline", "subjects": found}))


def _plan_registry(plan: _Plan, name: str, where: str, kind: str, options: Mapping[str, Any]) -> None:
    _unknown(plan, f"{where}.options", options, _REGISTRY_OPTIONS)
    fields: dict[str, Any] = {"kind": kind, "url": options.get("url")}
    if not isinstance(fields["url"], str):
        plan.error(f"{where}.options.url", "A registry catalog needs its url.")
    if "max-age" in options:
        max_age = options["max-age"]
        if isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age < 0:
            plan.error(f"{where}.options.max-age", f"max-age is a number of seconds, not {max_age!r}.")
        else:
            fields["max_age_s"] = int(max_age)
    if options.get("context", "default") != "default":
        plan.ignored.append(f"catalog {name}: context {options['context']} ignored, the default context is read")
    for key in sorted(_APICURIO_OPTIONS & set(options)):
        plan.ignored.append(f"catalog {name}: {key} ignored, Apicurio is read through its Confluent-compatible API")
    plan.catalogs.append(_NamedPlan(where=where, name=name, fields=fields))


def plan_topics(plan: _Plan, binding_name: str, binding: Mapping[str, Any]) -> bool:
    """Topic models from a kafka binding's `options.topics`; False if it has none (the binding is ignored)."""
    options = binding.get("options")
    topics = options.get("topics") if isinstance(options, Mapping) else None
    if not isinstance(topics, list) or not any(isinstance(t, Mapping) and ("key" in t or "value" in t) for t in topics):
        return False
    where = f"bindings.{binding_name}.options.topics"
    for index, topic in enumerate(topics):
        at = f"{where}[{index}]"
        if not isinstance(topic, Mapping) or not isinstance(topic.get("name"), str):
            plan.error(f"{at}.name", "A topic needs its name.")
            continue
        if "key" not in topic and "value" not in topic:
            continue
        others = sorted(str(key) for key in topic if key not in ("name", "key", "value"))
        if others:
            plan.ignored.append(f"binding {binding_name}, topic {topic['name']}: {', '.join(others)} ignored")
        fields = {side: _plan_model(plan, f"{at}.{side}", topic.get(side)) for side in ("key", "value")}
        known = next((p for p in plan.topic_models if p.name == topic["name"]), None)
        if known is None:
            plan.topic_models.append(_NamedPlan(where=at, name=topic["name"], fields=fields))
        elif known.fields != fields:
            plan.error(at, f"{known.where} gives topic {topic['name']} other models: say the same in both.")
    plan.ignored.append(f"binding {binding_name} (kafka): ignored but for its topics' key and value models")
    return True


def _plan_model(plan: _Plan, where: str, model: Any) -> dict[str, Any] | None:
    """A side's API form (`ModelShape`) from Zilla's model, or None."""
    if model is None:
        return None
    if not isinstance(model, Mapping) or not isinstance(model.get("model"), str):
        plan.error(f"{where}.model", "A model is a mapping with a model (avro, protobuf, json, string, ...).")
        return None
    _unknown(plan, where, model, _MODEL_KEYS)
    if model.get("view", "json") != "json":
        plan.error(f"{where}.view", "The view is json: events are sent as JSON.")
    found: dict[str, Any] = {"model": model["model"]}
    for key in ("encoding", "record"):
        if key in model:
            found[key] = model[key]
    catalog = model.get("catalog")
    if catalog is None:
        return found
    entries = list(catalog.items()) if isinstance(catalog, Mapping) else []
    if len(entries) != 1 or not isinstance(entries[0][1], list) or len(entries[0][1]) != 1:
        plan.error(
            f"{where}.catalog", "Name one catalog with one way to choose the schema: {name: [{strategy: topic}]}."
        )
        return found
    (catalog_name, (entry,)) = entries[0]
    at = f"{where}.catalog.{catalog_name}[0]"
    if not isinstance(entry, Mapping):
        plan.error(at, "An entry is {strategy: topic, version: latest}, {id: N} or {subject: S, version: latest}.")
        return found
    _unknown(plan, at, entry, _ENTRY_KEYS)
    found["catalog"] = str(catalog_name)
    for key in ("strategy", "id", "subject", "version", "record"):
        if key in entry:
            found[key] = entry[key]
    if isinstance(found.get("version"), str) and found["version"].isdigit():
        found["version"] = int(found["version"])
    return found


def inline_format(text: str, used_as: str | None) -> str:
    """The format of an inline subject's text: the model that reads it, else what the text parses as."""
    if used_as in (AVRO, PROTOBUF, JSON):
        return used_as
    try:
        json.loads(text)
    except ValueError:
        return PROTOBUF
    return AVRO if not check_schema(AVRO, text) else JSON


def subject_usage(catalog: str, topic_models: list[_NamedPlan]) -> dict[str, str]:
    """What model reads each subject the topic models name in `catalog` (literal subjects; wildcard subjects
    match in `used_as`)."""
    found: dict[str, str] = {}
    for topic_model in topic_models:
        for side in ("key", "value"):
            spec = topic_model.fields.get(side)
            if not isinstance(spec, Mapping) or spec.get("catalog") != catalog or spec.get("id") is not None:
                continue
            subject = spec.get("subject") or f"{topic_model.name}-{side}"
            found.setdefault(str(subject), str(spec.get("model")))
    return found


def used_as(subject: str, usage: Mapping[str, str]) -> str | None:
    return usage.get(subject) or next(
        (model for wanted, model in usage.items() if subject_matches(subject, wanted)), None
    )


def topic_models() -> list[TopicModel]:
    """Every topic model with its catalogs, by topic: what both exports read (one query)."""
    return list(TopicModel.objects.select_related("key_catalog", "value_catalog").order_by("topic"))


def export_catalogs(strict: bool, notes: list[str], models: list[TopicModel]) -> dict[str, Any]:
    """The `catalogs:` section (two queries; none more for registry catalogs only)."""
    usage_by_catalog: dict[str, dict[str, str]] = {}
    for topic_model in models:
        plan = _NamedPlan(where="", name=topic_model.topic, fields={
            side: model_representation(topic_model, side) for side in ("key", "value")
        })  # fmt: skip
        for side in ("key", "value"):
            catalog = plan.fields[side] and plan.fields[side]["catalog"]
            if catalog:
                usage_by_catalog.setdefault(catalog, {}).update(subject_usage(catalog, [plan]))
    exported: dict[str, Any] = {}
    for catalog in Catalog.objects.prefetch_related("schemas").order_by("name"):
        if catalog.is_registry:
            options: dict[str, Any] = {"url": redacted_url(catalog.url), "max-age": catalog.max_age_s}
            if options["url"] != catalog.url:
                notes.append(f"left out: catalog {catalog.name}'s URL user info (a credential)")
            if catalog.auth:
                notes.append(f"left out: catalog {catalog.name}'s Authorization header (a credential)")
            exported[catalog.name] = {"type": catalog.kind, "options": options}
            continue
        usage = usage_by_catalog.get(catalog.name, {})
        subjects: dict[str, Any] = {}
        latest: dict[str, Any] = {}
        for schema in sorted(catalog.schemas.all(), key=lambda s: (s.subject, s.version)):
            latest[schema.subject] = schema
        for subject, schema in latest.items():
            entry: dict[str, Any] = {"schema": schema.text, "version": str(schema.version)}
            if inline_format(schema.text, used_as(subject, usage)) != schema.format:
                if strict:
                    notes.append(f"left out: catalog {catalog.name}, subject {subject}: format {schema.format}")
                else:
                    entry["format"] = schema.format
                    notes.append(f"catalog {catalog.name}, subject {subject}: format (not in Zilla's schema)")
            if schema.version > 1:
                notes.append(f"catalog {catalog.name}, subject {subject}: only version {schema.version} is written")
            subjects[subject] = entry
        exported[catalog.name] = {"type": "inline", "options": {"subjects": subjects}}
    return exported


def export_topics(models: list[TopicModel]) -> list[dict[str, Any]]:
    """The kafka binding's `options.topics`: each topic model's key and value models, as Zilla writes them."""
    topics = []
    for topic_model in models:
        entry: dict[str, Any] = {"name": topic_model.topic}
        for side in ("key", "value"):
            spec = model_representation(topic_model, side)
            if spec is not None:
                entry[side] = _zilla_model(spec)
        topics.append(entry)
    return topics


def _zilla_model(spec: Mapping[str, Any]) -> dict[str, Any]:
    model: dict[str, Any] = {"model": spec["model"]}
    if spec["model"] in (AVRO, PROTOBUF, JSON):
        model["view"] = "json"
    if spec["encoding"]:
        model["encoding"] = spec["encoding"]
    if spec["catalog"] is None:
        return model
    if spec["strategy"] == TopicModel.Strategy.ID:
        entry: dict[str, Any] = {"id": spec["id"]}
    elif spec["strategy"] == TopicModel.Strategy.SUBJECT:
        entry = {"subject": spec["subject"], "version": spec["version"]}
    else:
        entry = {"strategy": "topic", "version": spec["version"]}
    if spec["record"]:
        entry["record"] = spec["record"]
    model["catalog"] = {spec["catalog"]: [entry]}
    return model


def catalog_fields(plan: _NamedPlan, topic_models: list[_NamedPlan]) -> dict[str, Any]:
    """`do_put_catalog` arguments for a planned catalog: each inline subject's format settled. A max-age the
    file leaves out is Zilla's default; the Authorization header, which Zilla cannot say, keeps its value."""
    fields = dict(plan.fields)
    if fields["kind"] == "inline":
        usage = subject_usage(plan.name, topic_models)
        fields["subjects"] = {
            subject: {
                "format": spec["format"] or inline_format(spec["schema"], used_as(subject, usage)),
                "schema": spec["schema"],
                "version": spec["version"],
            }
            for subject, spec in fields["subjects"].items()
        }
    return fields
