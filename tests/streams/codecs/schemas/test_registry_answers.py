"""What a schema registry's answers mean (streams/codecs/schemas/registry_answers.py): a schema with its format,
id and references, the subjects and versions that hold one; an answer not of the API's shape is the registry
being unavailable, one that can never be used is refused."""

from __future__ import annotations

from typing import Any

import pytest

from streams.codecs.schemas.registry_answers import (
    Reference,
    Refused,
    Schema,
    Unavailable,
    schema_of,
    subject_versions_of,
)


def test_it_reads_a_schema_with_its_format_and_references() -> None:
    body = {
        "schema": "syntax = 'proto3';",
        "schemaType": "PROTOBUF",
        "subject": "orders-value",
        "version": 3,
        "references": [{"name": "common.proto", "subject": "common", "version": 1}],
    }
    assert schema_of(body, 7) == Schema(
        "protobuf", "syntax = 'proto3';", 7, "orders-value", 3, (Reference("common.proto", "common", 1),)
    )


def test_a_schema_without_a_type_is_avro_and_keeps_the_id_it_was_asked_by() -> None:
    assert schema_of({"schema": '"string"', "id": "not a number"}, 12) == Schema("avro", '"string"', 12)
    assert schema_of({"schema": '"string"', "id": 4}, None).id == 4


@pytest.mark.parametrize("body", [None, [], {}, {"schema": 1}])
def test_an_answer_without_a_schema_is_the_registry_unavailable(body: Any) -> None:
    with pytest.raises(Unavailable) as caught:
        schema_of(body, 1)
    assert not caught.value.tied


@pytest.mark.parametrize(
    "body",
    [
        {"schema": "<xs:schema/>", "schemaType": "XML"},
        {"schema": '"string"', "references": {"name": "x"}},
        {"schema": '"string"', "references": [{"name": "x", "subject": "s", "version": "1"}]},
    ],
)
def test_a_schema_of_unknown_type_or_with_malformed_references_is_refused(body: Any) -> None:
    with pytest.raises(Refused) as caught:
        schema_of(body, 1)
    assert caught.value.tied


def test_it_reads_the_subjects_and_versions_that_hold_a_schema() -> None:
    body = [{"subject": "a", "version": 1}, {"subject": "b", "version": 2}]
    assert subject_versions_of(body) == frozenset({("a", 1), ("b", 2)})
    with pytest.raises(Unavailable):
        subject_versions_of([{"subject": "a"}])
