"""The tests' schema registry is a real one, and speaks Confluent's API as producers use it.

A topic's value schema lives under the subject `<topic>-value` (the `topic` strategy). Registering a schema gives
its id, the id that framed records carry after their magic byte; the id gives the schema back; a second, evolved
version of the subject gets an id of its own, so records written before and after the change are told apart;
registering a schema the subject holds already gives its id again.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.conftest import unique

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

ITEM_V1 = {
    "type": "record",
    "name": "Item",
    "namespace": "test.registry",
    "fields": [{"name": "id", "type": "string"}, {"name": "price", "type": "double"}],
}
# Version 2 adds an optional field, a change that the default BACKWARD compatibility allows.
ITEM_V2 = {**ITEM_V1, "fields": [*ITEM_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


def call(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    response = httpx.request(method, url, json=body, headers={"Content-Type": CONTENT_TYPE}, timeout=10)
    assert response.status_code == 200, (response.status_code, response.text)
    return response.json()


def register(registry: str, subject: str, schema: dict[str, Any]) -> int:
    body = call("POST", f"{registry}/subjects/{subject}/versions", {"schemaType": "AVRO", "schema": json.dumps(schema)})
    schema_id: int = body["id"]
    return schema_id


def test_an_avro_schema_registered_under_the_topic_subject_reads_back_by_id(schema_registry: str) -> None:
    subject = f"{unique('t')}-value"

    first = register(schema_registry, subject, ITEM_V1)
    by_id = call("GET", f"{schema_registry}/schemas/ids/{first}")
    assert json.loads(by_id["schema"]) == ITEM_V1
    assert by_id.get("schemaType", "AVRO") == "AVRO"

    second = register(schema_registry, subject, ITEM_V2)
    assert second != first
    assert json.loads(call("GET", f"{schema_registry}/schemas/ids/{second}")["schema"]) == ITEM_V2

    assert call("GET", f"{schema_registry}/subjects/{subject}/versions") == [1, 2]
    latest = call("GET", f"{schema_registry}/subjects/{subject}/versions/latest")
    assert (latest["subject"], latest["version"], latest["id"]) == (subject, 2, second)
    assert subject in call("GET", f"{schema_registry}/subjects")
    assert register(schema_registry, subject, ITEM_V1) == first
