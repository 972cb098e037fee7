"""Schema texts checked on save: an Avro schema that parses, a `.proto` that compiles, a JSON Schema that is one.

Pure functions, no Django and no database, so the models' `clean()` and anything else can call them. The data
plane decodes with its own codecs (`streams/codecs/`); this module tells whether a text is a schema of its
format, with messages for the field at fault, and holds the bounds both sides apply: the codecs refuse a
registry's schema on the same grounds as a form refuses an inline one.

- Avro: the text is JSON that fastavro's `parse_schema` accepts (names, types, defaults, unique symbols), and
  every record of it costs decoding work in proportion to its bytes (`avro_bound_problems`): no array of items
  that take no bytes (`null`, an empty record: a 6-byte record could declare 10^8 of them), no decimal with a
  precision over `MAX_DECIMAL_PRECISION` or a scale over its precision (a 2-byte decimal with scale 10^9 is a
  string of 10^9 digits).
- JSON Schema: the text is a JSON object (or boolean) that its draft's meta-schema accepts; without `$schema`,
  draft 7 (the draft AsyncAPI names). A `$schema` this library does not know is refused, not guessed. Its
  `pattern`s run in RE2 (time linear in the text, no backreferences or lookaround) and its `$ref`s resolve
  (`json_schema_bound_problems`).
- A `string` model's encoding is a character set (`encoding_problem`): a codec of stored text, not one of
  Python's own transforms (`hex`, `rot13`, `zlib`) or special encodings (`idna`, `punycode`, whose decoding time
  grows with the square of the text).
- Protobuf: the text compiles with protoc, the compiler grpcio-tools ships in its wheel (run offline, in a
  subprocess: protoc writes its errors to the process's own stderr), with the well-known types importable
  (`google/protobuf/timestamp.proto`, ...). The messages it declares are listed for a model's `record`.
"""

from __future__ import annotations

import codecs
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
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from google.protobuf import descriptor_pb2

AVRO = "avro"
PROTOBUF = "protobuf"
JSON = "json"
FORMATS = (AVRO, PROTOBUF, JSON)

PROTO_FILE = "schema.proto"
PROTOC_TIMEOUT_S = 20
MAX_MESSAGES = 5  # protoc can report many errors; the first few say enough
MAX_DECIMAL_PRECISION = 1000  # PostgreSQL's numeric stops there too; each digit is a character of the JSON
# Text encodings of Python's that are no character set of stored text (the "Python Specific Encodings").
_SPECIAL_ENCODINGS = frozenset({"idna", "mbcs", "oem", "palmos", "punycode", "raw_unicode_escape", "undefined",
                                "unicode_escape"})  # fmt: skip
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # JSON Schema keywords whose values are data


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
    except RecursionError:
        return None, "Not JSON this platform reads: it nests too deep."


def _avro_problems(text: str) -> list[str]:
    value, problem = _json(text)
    if problem:
        return [f"An Avro schema is JSON. {problem}"]
    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(value, named_schemas=named)
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        return [f"Not an Avro schema: {exc}."]
    except RecursionError:
        return ["Not an Avro schema this platform reads: it nests too deep."]
    return avro_bound_problems(parsed, named)


_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def avro_bound_problems(schema: Any, named: dict[str, Any]) -> list[str]:
    """What makes decoding a record of `schema` (as fastavro's `parse_schema` gives it, its named types in
    `named`) cost more than its bytes: arrays of items of no bytes, decimals with a precision or scale out of
    bounds. Recursive schemas are fine: their depth is bounded where records are decoded."""
    problems: list[str] = []
    seen: set[str] = set()
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            if node not in _AVRO_PRIMITIVES and node not in seen and node in named:
                seen.add(node)
                pending.append(named[node])
            continue
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        name = node.get("name")
        if isinstance(name, str) and kind in ("record", "error", "enum", "fixed"):
            seen.add(name)
        if node.get("logicalType") == "decimal" and kind in ("bytes", "fixed"):
            problems.extend(_decimal_problems(node))
        if kind in ("record", "error"):
            pending.extend(field["type"] for field in node.get("fields", ()))
        elif kind == "array":
            if _no_bytes(node["items"], named, set()):
                problems.append(
                    f"An array's items take no bytes ({_avro_name(node['items'])}): a record of a few bytes could "
                    "declare millions of them. Give the items a field that takes bytes, or use a count."
                )
            pending.append(node["items"])
        elif kind == "map":
            pending.append(node["values"])
        elif not isinstance(kind, str):
            pending.append(kind)
    return problems


def _decimal_problems(node: dict[str, Any]) -> list[str]:
    precision, scale = node.get("precision"), node.get("scale", 0)
    if not isinstance(precision, int) or not 1 <= precision <= MAX_DECIMAL_PRECISION:
        return [f"A decimal's precision is 1 to {MAX_DECIMAL_PRECISION} digits, not {precision!r}."]
    if not isinstance(scale, int) or not 0 <= scale <= precision:
        return [f"A decimal's scale is 0 to its precision ({precision}), not {scale!r}."]
    return []


def _no_bytes(node: Any, named: dict[str, Any], visiting: set[str]) -> bool:
    """Whether a value of `node` is written in no bytes at all: null, a fixed of size 0, a record of such fields."""
    if isinstance(node, str):
        if node == "null":
            return True
        if node in _AVRO_PRIMITIVES or node in visiting or node not in named:
            return False
        return _no_bytes(named[node], named, visiting | {node})
    if not isinstance(node, dict):
        return False  # a union writes its branch's index
    kind = node.get("type")
    if kind == "null":
        return True
    if kind == "fixed":
        return node.get("size") == 0
    if kind in ("record", "error"):
        inner = visiting | {node.get("name", "")}
        return all(_no_bytes(field["type"], named, inner) for field in node.get("fields", ()))
    return False


def _avro_name(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, dict):
        return str(node.get("name", node.get("type")))
    return "a union"


def encoding_problem(encoding: str) -> str | None:
    """Why a `string` model cannot have `encoding`, or None: it must be a character set of stored text."""
    try:
        found = codecs.lookup(encoding)
    except LookupError:
        return f"Unknown encoding {encoding!r}: e.g. utf_8, utf_16 or latin_1."
    not_text = f"{encoding!r} is not a character set of stored text: e.g. utf_8, utf_16 or latin_1."
    if found.name.replace("-", "_") in _SPECIAL_ENCODINGS:
        return not_text
    try:
        b"x".decode(encoding, "replace")  # bytes.decode takes text encodings only: not hex, base64, rot13, zlib
    except (LookupError, UnicodeError):
        return not_text
    return None


def linear_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2, which matches in time linear in the text; `ValueError` with RE2's reason when it
    cannot (backreferences, lookaround, a repetition over 1000)."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(str(reason)) from None


def json_schema_bound_problems(schema: Any, references: tuple[tuple[str, Any], ...] = ()) -> list[str]:
    """What a JSON Schema (parsed) has that records cannot be checked against in bounded time or at all: a
    `pattern` RE2 cannot run, a `$ref` that resolves to nothing (checked when no subschema sets its own `$id`,
    which would move the base its references resolve against). `references` are the (name, schema) pairs a
    registry's schema imports."""
    problems: list[str] = []
    refs: list[str] = []
    nested_ids = False
    pending: list[tuple[Any, bool]] = [(schema, True)]
    while pending:
        node, root = pending.pop()
        if isinstance(node, list):
            pending.extend((item, False) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns.extend(node["patternProperties"])
        for pattern in patterns:
            try:
                linear_pattern(pattern)
            except ValueError as exc:
                problems.append(f"The pattern {pattern!r} cannot run in linear time (RE2): {exc}.")
        if isinstance(node.get("$ref"), str):
            refs.append(node["$ref"])
        if not root and isinstance(node.get("$id", node.get("id")), str):
            nested_ids = True
        pending.extend((value, False) for key, value in node.items() if key not in _DATA_KEYWORDS)
    if refs and not nested_ids and isinstance(schema, dict):
        problems.extend(_unresolved(schema, refs, references))
    return problems


def _unresolved(schema: dict[str, Any], refs: list[str], references: tuple[tuple[str, Any], ...]) -> list[str]:
    draft = referencing.jsonschema.specification_with(
        str(schema.get("$schema", "")), default=referencing.jsonschema.DRAFT7
    )
    imported = [
        (name, referencing.Resource.from_contents(value, default_specification=draft)) for name, value in references
    ]
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(imported)
    resolver = registry.resolver_with_root(referencing.Resource.from_contents(schema, default_specification=draft))
    problems = []
    for ref in dict.fromkeys(refs):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            problems.append(f"The $ref {ref!r} resolves to nothing: name a definition of this schema.")
    return problems


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
    return json_schema_bound_problems(value)


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
