"""Why a record did not decode, and why a schema is refused: the two errors of the schema codecs.

A `DecodeError` carries one `Reason` from a short, fixed list: it is what the data plane counts per topic and
reason, so it must stay small and stable. The reasons, in the order a record meets them:

- `registry-unavailable`: the registry could not be asked or answered something that is not its API (down,
  timed out, refused our credentials, or another service on its port), and no cached answer stands in.
- `magic-byte`: a registry catalog's record does not start with the magic byte 0.
- `truncated`: the record ends before its framing or its payload does.
- `unknown-schema`: the schema the record names (by id, or the subject and version of the model) does not exist,
  or the registry kept refusing that one lookup (a `403`, an answer too large) past the time given to it.
- `schema-mismatch`: the record's schema id is not one its model allows (another subject's, another version's),
  the schema is of another format than the model (an Avro schema for a `protobuf` model), a Protobuf message
  index or `record` names no message, a JSON value breaks its JSON Schema, or the schema the registry gives does
  not compile or could make a record cost more than its bytes (bindings/schemas.py).
- `not-json`: a `json` model's record is not JSON (or not UTF-8).
- `invalid`: the payload does not decode under its schema or model (bad Avro or Protobuf bytes, trailing bytes,
  a `string` that is not in its encoding, a number of the wrong width).
- `too-large`: the record is past a bound on the work one record may cost (`Limits`, limits.py): its bytes, its
  decoded JSON's bytes, its items, or how deep it nests.
- `too-slow`: decoding it took longer than the per-record budget; the decoder process was ended and replaced.
- `crashed`: decoding it failed in a way nothing foresaw (an exception of any other kind), or the decoder process
  died while it decoded it (a crash in a C extension, the kernel's OOM killer): the record is never tried again.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    REGISTRY_UNAVAILABLE = "registry-unavailable"
    MAGIC_BYTE = "magic-byte"
    TRUNCATED = "truncated"
    UNKNOWN_SCHEMA = "unknown-schema"
    SCHEMA_MISMATCH = "schema-mismatch"
    NOT_JSON = "not-json"
    INVALID = "invalid"
    TOO_LARGE = "too-large"
    TOO_SLOW = "too-slow"
    CRASHED = "crashed"


class DecodeError(Exception):
    """A record that does not decode: its `reason` is counted, its `detail` is for a log line."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type[DecodeError], tuple[Reason, str]]:
        return DecodeError, (self.reason, self.detail)


class SchemaError(ValueError):
    """A schema or a model that cannot be used: an Avro schema that does not parse, a `.proto` that does not
    compile, a JSON Schema that is not one, a model that names no schema. The message is for a form's field."""
