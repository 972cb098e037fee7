"""zilla.yaml catalogs and kafka topic models: a Zilla user's file with an inline catalog and an Avro topic imports,
and exports back to the same catalogs and topics."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from bindings.history import Actor, object_state
from bindings.models import Catalog, InlineSchema, TopicModel
from bindings.selectors import ModelSpec, topic_model_specs
from bindings.services import do_put_catalog, do_put_topic_model
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla

pytestmark = pytest.mark.django_db

ACTOR = Actor(name="tester", source="import")
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "status", "type": ["null", "string"], "default": None}],
}
ITEM_SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}

ZILLA_YAML = f"""
name: shop
catalogs:
  shop_catalog:
    type: inline
    options:
      subjects:
        orders-value:
          schema: '{json.dumps(ORDER)}'
        items:
          schema: '{json.dumps(ITEM_SCHEMA)}'
          version: latest
  registry:
    type: karapace
    options:
      url: http://karapace:8081
      max-age: 30
bindings:
  north_sse_server:
    type: sse
    kind: server
    exit: north_sse_kafka_mapping
  north_sse_kafka_mapping:
    type: sse-kafka
    kind: proxy
    routes:
      - when:
          - path: /orders
        exit: north_kafka_cache_client
        with:
          topic: orders
  north_kafka_cache_client:
    type: kafka
    kind: cache_client
    options:
      topics:
        - name: orders
          key:
            model: string
            encoding: utf_8
          value:
            model: avro
            view: json
            catalog:
              shop_catalog:
                - strategy: topic
                  version: latest
        - name: items-*
          value:
            model: json
            catalog:
              shop_catalog:
                - subject: items
                  version: latest
        - name: payments
          value:
            model: protobuf
            view: json
            catalog:
              registry:
                - id: 42
                  record: shop.Payment
    exit: south_kafka_cache_server
  south_kafka_cache_server:
    type: kafka
    kind: cache_server
    options:
      bootstrap:
        - orders
      topics:
        - name: orders
          key:
            model: string
            encoding: utf_8
          value:
            model: avro
            view: json
            catalog:
              shop_catalog:
                - strategy: topic
                  version: latest
    exit: south_kafka_client
"""


def state() -> dict[str, Any]:
    """Every catalog and topic model as the API shows them."""
    return {
        "catalogs": [object_state("catalog", c.name) for c in Catalog.objects.order_by("name")],
        "topic_models": [object_state("topic-model", t.topic) for t in TopicModel.objects.order_by("topic")],
    }


def test_a_zilla_file_with_an_inline_catalog_and_an_avro_topic_imports() -> None:
    result = do_import_zilla(ZILLA_YAML, actor=ACTOR)
    created = [f"{item.kind} {item.name}" for item in result.of("created")]
    assert created[:5] == [
        "catalog shop_catalog",
        "catalog registry",
        "topic-model orders",
        "topic-model items-*",
        "topic-model payments",
    ]
    schemas = {s.subject: (s.format, s.version) for s in InlineSchema.objects.all()}
    assert schemas == {"orders-value": ("avro", 1), "items": ("json", 1)}  # formats from the models that read them
    registry = Catalog.objects.get(name="registry")
    assert (registry.kind, registry.url, registry.max_age_s) == ("karapace", "http://karapace:8081", 30)
    specs = {spec.topic_pattern: spec for spec in topic_model_specs()}
    assert specs["orders"].key == ModelSpec(model="string", encoding="utf_8")
    assert specs["orders"].value == ModelSpec(model="avro", catalog="shop_catalog", strategy="topic")
    assert specs["items-*"].value == ModelSpec(model="json", catalog="shop_catalog", subject="items")
    assert specs["payments"].value == ModelSpec(
        model="protobuf", catalog="registry", schema_id=42, record="shop.Payment"
    )
    assert (
        "binding north_kafka_cache_client (kafka): ignored but for its topics' key and value models" in result.ignored
    )


def test_it_exports_back_to_the_same_catalogs_and_topics() -> None:
    do_import_zilla(ZILLA_YAML, actor=ACTOR)
    imported = state()
    text, notes = export_zilla(strict=True)
    exported = yaml.safe_load(text)
    original = yaml.safe_load(ZILLA_YAML)
    assert exported["catalogs"]["registry"] == {
        "type": "karapace",
        "options": {"url": "http://karapace:8081", "max-age": 30},
    }
    subjects = exported["catalogs"]["shop_catalog"]["options"]["subjects"]
    assert {name: json.loads(s["schema"]) for name, s in subjects.items()} == {
        "orders-value": ORDER,
        "items": ITEM_SCHEMA,
    }
    topics = {t["name"]: t for t in exported["bindings"]["kafka_cache_client"]["options"]["topics"]}
    assert topics["orders"] == original["bindings"]["north_kafka_cache_client"]["options"]["topics"][0]
    assert topics["items-*"]["value"]["catalog"] == {"shop_catalog": [{"subject": "items", "version": "latest"}]}
    assert topics["payments"]["value"]["catalog"] == {"registry": [{"id": 42, "record": "shop.Payment"}]}
    assert not any("format" in note for note in notes)  # every subject's format is what an import infers

    for model in (TopicModel, Catalog):
        model.objects.all().delete()
    do_import_zilla(text, actor=ACTOR)
    assert state() == imported
    assert do_import_zilla(text, actor=ACTOR).of("updated") == []  # a second import changes nothing


def test_a_subject_no_model_reads_keeps_its_format_through_an_extension() -> None:
    do_put_catalog(name="cat", subjects={"plain": {"format": "json", "schema": '{"type": "string"}'}})
    text, notes = export_zilla()
    assert yaml.safe_load(text)["catalogs"]["cat"]["options"]["subjects"]["plain"]["format"] == "json"
    assert "catalog cat, subject plain: format (not in Zilla's schema)" in notes
    Catalog.objects.all().delete()
    do_import_zilla(text, actor=ACTOR)
    assert InlineSchema.objects.get().format == "json"


def test_the_auth_header_is_never_exported_and_kept_on_import() -> None:
    do_put_catalog(name="registry", kind="schema-registry", url="http://registry:8081", auth="Basic c2VjcmV0")
    do_put_topic_model(topic="t", value={"model": "avro", "catalog": "registry"})
    text, notes = export_zilla()
    assert "c2VjcmV0" not in text
    assert "left out: catalog registry's Authorization header (a credential)" in notes
    do_import_zilla(text, actor=ACTOR)
    assert Catalog.objects.get().auth == "Basic c2VjcmV0"


VALUE_VIEW = "value:\n            model: avro\n            view: json"
TOPIC_ENTRY = "- strategy: topic\n                  version: latest"


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        (VALUE_VIEW, VALUE_VIEW.replace("json", "xml"),
         "bindings.north_kafka_cache_client.options.topics[0].value.view"),
        (TOPIC_ENTRY, f"{TOPIC_ENTRY}\n                - id: 3",
         "bindings.north_kafka_cache_client.options.topics[0].value.catalog"),
        ("type: karapace", "type: karapace\n    colour: red", "catalogs.registry.colour"),
        ("url: http://karapace:8081", "url: 5", "catalogs.registry.options.url"),
    ],
)  # fmt: skip
def test_problems_are_keyed_by_where_they_are_in_the_file(old: str, new: str, where: str) -> None:
    assert old in ZILLA_YAML
    with pytest.raises(ZillaConfigError) as caught:
        do_import_zilla(ZILLA_YAML.replace(old, new, 1), actor=ACTOR)
    assert where in caught.value.errors, caught.value.errors
    assert not Catalog.objects.exists()


def test_a_bad_inline_schema_is_an_error_on_its_subject_and_nothing_is_written() -> None:
    text = ZILLA_YAML.replace(
        json.dumps(ORDER), '{"type": "record", "name": "O", "fields": [{"name": "i", "type": "strin"}]}'
    )
    with pytest.raises(ZillaConfigError) as caught:
        do_import_zilla(text, actor=ACTOR)
    assert "catalogs.shop_catalog.options.subjects.orders-value.schema" in caught.value.errors
    assert not TopicModel.objects.exists()


def test_the_same_topic_with_other_models_in_two_kafka_bindings_is_refused() -> None:
    text = ZILLA_YAML.replace("            encoding: utf_8", "            encoding: utf_16", 1)
    with pytest.raises(ZillaConfigError) as caught:
        do_import_zilla(text, actor=ACTOR)
    assert "bindings.south_kafka_cache_server.options.topics[0]" in caught.value.errors


def test_a_url_with_credentials_is_refused_where_it_is_in_the_file() -> None:
    text = ZILLA_YAML.replace("url: http://karapace:8081", "url: http://ada:s3cret@karapace:8081", 1)

    with pytest.raises(ZillaConfigError) as caught:
        do_import_zilla(text, actor=ACTOR)

    assert "carries no credentials" in " ".join(caught.value.errors["catalogs.registry.options.url"])
    assert not Catalog.objects.exists()


def test_an_import_that_moves_a_registry_removes_its_auth_header() -> None:
    do_put_catalog(name="registry", kind="karapace", url="http://karapace:8081", auth="Basic c2VjcmV0")
    do_import_zilla(ZILLA_YAML, actor=ACTOR)
    assert Catalog.objects.get(name="registry").auth == "Basic c2VjcmV0"  # the same registry: kept

    do_import_zilla(ZILLA_YAML.replace("karapace:8081", "elsewhere:8081"), actor=ACTOR)

    moved = Catalog.objects.get(name="registry")
    assert (moved.url, moved.auth) == ("http://elsewhere:8081", "")
    assert object_state("catalog", "registry")["auth_set"] is False  # type: ignore[index]


def test_a_url_saved_with_credentials_is_exported_without_them() -> None:
    do_put_catalog(name="registry", kind="karapace", url="http://karapace:8081")
    Catalog.objects.update(url="http://ada:s3cret@karapace:8081")  # as an older version could save it

    text, notes = export_zilla()

    assert "s3cret" not in text
    assert yaml.safe_load(text)["catalogs"]["registry"]["options"]["url"] == "http://***@karapace:8081"
    assert "left out: catalog registry's URL user info (a credential)" in notes
