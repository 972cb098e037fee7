"""The checks the control plane runs on a schema before it keeps one: pure functions, no Django."""

from __future__ import annotations

from streams.codecs.schemas import avro, json_values, protobuf
from streams.codecs.schemas.errors import SchemaError
from streams.codecs.schemas.spec import SCHEMA_FORMATS, SchemaFormat


def check_schema(format: SchemaFormat, text: str) -> None:
    """Return if `text` is a schema of `format`; else raise `SchemaError` with a message for the form's field: an
    Avro schema that does not parse, a `.proto` that does not compile, a JSON Schema that is not one."""
    if format == "avro":
        avro.check(text)
    elif format == "protobuf":
        protobuf.check(text)
    elif format == "json":
        json_values.check(text)
    else:
        raise SchemaError(f"a schema format is one of {', '.join(SCHEMA_FORMATS)}")
