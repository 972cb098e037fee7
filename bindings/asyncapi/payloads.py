"""The payload of a route's events in the AsyncAPI document, from the topic model that covers its topic.

A route's topic may hold `${...}` placeholders: it stands for every topic it can render, read here as a glob
(`orders-${params.region}` -> `orders-*`). The topic model whose pattern covers every such topic describes the
route: the most specific of them (as the data plane picks, bindings/models/catalogs.py), so a narrower model that
covers only some of the route's topics (`orders-eu-*`) is not the one shown. Then:

- an Avro, Protobuf or JSON Schema value whose schema an inline catalog holds: the payload is that schema, as a
  Multi Format Schema Object with its `schemaFormat` (`application/vnd.apache.avro+json;version=1.9.0`,
  `application/vnd.google.protobuf;version=3`, `application/schema+json;version=draft-07`); the events carry its
  records decoded to JSON;
- a schema in a registry catalog (or chosen by id): the document cannot carry it, since it is read from the
  registry when records arrive and may change with every version registered; the payload says where it is;
- a string or a number: its JSON type; JSON without a schema: any JSON value;
- no topic model: the value's bytes as they are, a string.
"""

from __future__ import annotations

import json
from typing import Any

from bindings.models import LATEST, Catalog, TopicModel
from bindings.models.catalogs import covers, held_schema, topic_glob, topic_specificity

SCHEMA_FORMATS = {
    "avro": "application/vnd.apache.avro+json;version=1.9.0",
    "protobuf": "application/vnd.google.protobuf;version=3",
    "json": "application/schema+json;version=draft-07",
}
_JSON_TYPES = {"string": "string", "int32": "integer", "int64": "integer", "float": "number", "double": "number"}
RAW = {"type": "string", "description": "The Kafka message value, bytes passed through."}


class Payloads:
    """The payload of each route's value events; reads the topic models and catalogs once."""

    def __init__(self) -> None:
        models = TopicModel.objects.select_related("key_catalog", "value_catalog")
        self.models = sorted(models, key=lambda tm: topic_specificity(tm.topic))
        self.catalogs = {c.name: c for c in Catalog.objects.prefetch_related("schemas")}

    def value_payload(self, topic: str) -> tuple[dict[str, Any], str]:
        """(the payload of the `event` message, its content type) for a route reading `topic` (a template)."""
        glob = topic_glob(topic)
        found = next((tm for tm in self.models if covers(tm.topic, glob)), None)
        if found is None or not found.value_model:
            return RAW, "text/event-stream"
        model, catalog = found.value_model, found.value_catalog
        where = f"Topic model `{found.topic}`"
        if model in _JSON_TYPES:
            return {"type": _JSON_TYPES[model], "description": f"{where}: the value as {model}."}, "application/json"
        if catalog is None:
            return {"description": f"{where}: any JSON value."}, "application/json"
        choice = _choice(found)
        if catalog.is_registry or found.value_strategy == TopicModel.Strategy.ID:
            return {
                "description": (
                    f"{where}: {model} records decoded to JSON. Their schema ({choice}) is in the {catalog.kind} "
                    f"registry of catalog `{catalog.name}`: it is read from the registry as records arrive (each "
                    "record names the version it was written with), so this document cannot carry it."
                )
            }, "application/json"
        subject = found.value_subject if found.value_strategy == TopicModel.Strategy.SUBJECT else f"{glob}-value"
        schema = held_schema(list(self.catalogs[catalog.name].schemas.all()), subject, found.value_version or LATEST)
        if schema is None:
            return {"description": f"{where}: {model} records decoded to JSON ({choice})."}, "application/json"
        text: Any = schema.text if schema.format == "protobuf" else json.loads(schema.text)
        return {"schemaFormat": SCHEMA_FORMATS[schema.format], "schema": text}, "application/json"


def _choice(topic_model: TopicModel) -> str:
    strategy = topic_model.value_strategy
    if strategy == TopicModel.Strategy.ID:
        return f"schema id {topic_model.value_schema_id}"
    version = topic_model.value_version or LATEST
    subject = topic_model.value_subject if strategy == TopicModel.Strategy.SUBJECT else "<topic>-value"
    return f"subject {subject}, version {version}"
