"""Schema texts checked on save: an Avro schema that parses, a `.proto` that compiles, a JSON Schema that is one.

Pure functions, no Django and no database, so the models' `clean()` and anything else can call them. The data
plane decodes with its own codecs (`streams/codecs/`); this module only tells whether a text is a schema of its
format, with messages for the field at fault.

- Avro: the text is JSON that fastavro's `parse_schema` accepts (names, types, defaults, unique symbols).
- JSON Schema: the text is a JSON object (or boolean) that its draft's meta-schema accepts; without `$schema`,
  draft 7 (the draft AsyncAPI names). A `$schema` this library does not know is refused, not guessed.
- Protobuf: the text compiles with protoc, the compiler grpcio-tools ships in its wheel (run offline, in a
  subprocess: protoc writes its errors to the process's own stderr), with the well-known types importable
  (`google/protobuf/timestamp.proto`, ...). The messages it declares are listed for a model's `record`.
"""

from __future__ import annotations

import importlib.resources
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import fastavro
import jsonschema.exceptions
import jsonschema.validators
from google.protobuf import descriptor_pb2

AVRO = "avro"
PROTOBUF = "protobuf"
JSON = "json"
FORMATS = (AVRO, PROTOBUF, JSON)

PROTO_FILE = "schema.proto"
PROTOC_TIMEOUT_S = 20
MAX_MESSAGES = 5  # protoc can report many errors; the first few say enough


def check_schema(schema_format: str, text: str) -> list[str]:
    """What is wrong with `text` as a schema of `schema_format` (avro, protobuf or json); empty if nothing."""
    if schema_format == AVRO:
        return _avro_problems(text)
    if schema_format == JSON:
        return _json_schema_problems(text)
    if schema_format == PROTOBUF:
        return compile_proto(text)[0]
    return [f"The format is one of {', '.join(FORMATS)}, not {schema_format!r}."]


def proto_messages(text: str) -> tuple[str, ...] | None:
    """The full names of the messages (nested ones too) a `.proto` text declares, or None if it does not compile."""
    problems, names = compile_proto(text)
    return None if problems else names


def _json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"Not JSON: {exc}."


def _avro_problems(text: str) -> list[str]:
    value, problem = _json(text)
    if problem:
        return [f"An Avro schema is JSON. {problem}"]
    try:
        fastavro.parse_schema(value)
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        return [f"Not an Avro schema: {exc}."]
    return []


_UNKNOWN_DRAFT: Any = object()  # jsonschema's `default` takes a validator class; this sentinel is never one


def _json_schema_problems(text: str) -> list[str]:
    value, problem = _json(text)
    if problem:
        return [f"A JSON Schema is JSON. {problem}"]
    if not isinstance(value, dict | bool):
        return ["A JSON Schema is an object (or true or false)."]
    validator: Any = jsonschema.validators.validator_for(value, default=_UNKNOWN_DRAFT)
    if validator is _UNKNOWN_DRAFT:
        if isinstance(value, dict) and "$schema" in value:
            return [f"Unknown $schema {value['$schema']!r}: name a JSON Schema draft, e.g. draft-07."]
        validator = jsonschema.validators.Draft7Validator
    try:
        validator.check_schema(value)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        return [f"Not a JSON Schema{f' at {where}' if where else ''}: {exc.message}."]
    return []


def compile_proto(text: str) -> tuple[list[str], tuple[str, ...]]:
    """Compile a `.proto` text: (protoc's problems, the message names it declares)."""
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="proto-") as folder:
        Path(folder, PROTO_FILE).write_text(text, encoding="utf-8")
        out = Path(folder, "schema.pb")
        command = [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{folder}", f"-I{include}",
            f"--descriptor_set_out={out}", PROTO_FILE,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, cwd=folder, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return [f"protoc did not finish within {PROTOC_TIMEOUT_S} s."], ()
        if done.returncode != 0 or not out.exists():
            output = (done.stderr or done.stdout).replace(f"{folder}/", "")
            lines = [line.strip() for line in output.splitlines() if line.strip()]
            return [f"Does not compile: {line}" for line in lines[:MAX_MESSAGES]] or ["Does not compile."], ()
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    names: list[str] = []
    for file in files.file:
        prefix = f"{file.package}." if file.package else ""
        pending = [(prefix, message) for message in file.message_type]
        while pending:
            outer, message = pending.pop(0)
            names.append(f"{outer}{message.name}")
            pending.extend((f"{outer}{message.name}.", nested) for nested in message.nested_type)
    if not names:
        return ["The .proto declares no message."], ()
    return [], tuple(names)
