"""What the schema registry's answers mean, apart from asking (streams/codecs/schemas/registry.py): a schema, with
its format and the schemas it references, or the (subject, version)s that hold one, read from the JSON body of an
answer of Confluent's REST API. No I/O.

An answer not of the API's shape is the registry being unavailable (`Unavailable`: its record waits, and the
lookup is asked again); one of the API's shape that cannot be used however often it is asked (a schema type not
known, references not of the API's shape) is `Refused`, which the client gives up on after a while.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.codecs.schemas.spec import SchemaFormat

_FORMATS: dict[str, SchemaFormat] = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json"}


@dataclass(frozen=True)
class Reference:
    """A schema another one imports: its `name` in the importing schema (a `.proto` file name, an Avro type)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema as a catalog gives it. `id` is None for inline schemas, which have none."""

    format: SchemaFormat
    text: str
    id: int | None = None
    subject: str | None = None
    version: int | None = None
    references: tuple[Reference, ...] = ()


SubjectVersions = frozenset[tuple[str, int]]
Answer = Schema | SubjectVersions


class Failure(Exception):
    """A lookup that got no answer it can use; `tied`: because of what was asked, not the registry being down."""

    tied = False


class Unavailable(Failure):
    """The registry answered, but not with an answer of its API, or not in time: it is not there for now."""


class Refused(Failure):
    """The registry's answer to this lookup cannot be used, however often it is asked."""

    tied = True


def schema_of(body: Any, schema_id: int | None) -> Schema:
    """The schema of an answer; anything that is not the API's shape is the registry being unavailable."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise Unavailable("an answer without a schema")
    kind = body.get("schemaType", "AVRO")
    if kind not in _FORMATS:
        raise Refused(f"a schema of unknown type {str(kind)[:40]!r}")
    references = body.get("references") or []
    if not isinstance(references, list) or not all(_is_reference(ref) for ref in references):
        raise Refused("malformed references")
    found_id = body.get("id", schema_id)
    version = body.get("version")
    subject = body.get("subject")
    return Schema(
        format=_FORMATS[kind],
        text=body["schema"],
        id=found_id if isinstance(found_id, int) else schema_id,
        subject=subject if isinstance(subject, str) else None,
        version=version if isinstance(version, int) else None,
        references=tuple(Reference(ref["name"], ref["subject"], ref["version"]) for ref in references),
    )


def subject_versions_of(body: Any) -> SubjectVersions:
    """The (subject, version)s of an answer; anything else is the registry being unavailable."""
    if not isinstance(body, list) or not all(
        isinstance(item, dict) and isinstance(item.get("subject"), str) and isinstance(item.get("version"), int)
        for item in body
    ):
        raise Unavailable("an answer that is not a list of subjects and versions")
    return frozenset((item["subject"], item["version"]) for item in body)


def _is_reference(ref: Any) -> bool:
    return (
        isinstance(ref, dict)
        and isinstance(ref.get("name"), str)
        and isinstance(ref.get("subject"), str)
        and isinstance(ref.get("version"), int)
    )
