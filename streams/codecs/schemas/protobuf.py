"""Protobuf to its canonical proto3 JSON mapping, from a schema given as `.proto` text or as a serialized
`FileDescriptorProto` (base64, as confluent-kafka's serializers register it and some registries return it).

`.proto` text is compiled by protoc itself: grpcio-tools ships it in its wheel, with the well-known types'
`.proto` files, so compiling needs no network and no system package. It runs as a child process (grpc_tools'
`protoc` module), once per schema: protoc writes its errors to the process's stderr, which goes to a file for the
error message, and a compiler crash cannot take the fetch process with it. A registry's `.proto` is anyone's
who may register one, so the child has a `Budget`: it is killed past `timeout_s`, and no file it writes (the
descriptor set, its errors) may grow past `max_bytes` (the kernel's file size limit, set in the child before
protoc starts). A schema over budget is refused like one that does not compile, and remembered as refused.
The descriptors go into a pool of the schema's own, so two versions of one `.proto` file never meet.
"""

from __future__ import annotations

import base64
import binascii
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message,
    message_factory,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FileDescriptor

from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.spec import DEFAULT_PROTOC_MAX_BYTES, DEFAULT_PROTOC_TIMEOUT_S
from streams.codecs.schemas.timing import schema_work

MAIN_FILE = "schema.proto"
MAX_ERROR_BYTES = 16 * 1024  # what of protoc's errors goes into the message
# The child: limits first, then protoc as `python -m grpc_tools.protoc` runs it (with the well-known types' imports).
_CHILD = """
import resource, runpy, signal, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: past the limit, protoc is killed at once
sys.argv = ["grpc_tools.protoc", *sys.argv[2:]]
runpy.run_module("grpc_tools.protoc", run_name="__main__", alter_sys=True)
"""
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
# The well-known types, which a serialized descriptor names as dependencies without carrying them.
_WELL_KNOWN: dict[str, FileDescriptor] = {
    module.DESCRIPTOR.name: module.DESCRIPTOR
    for module in (
        any_pb2,
        api_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )
}


@dataclass(frozen=True)
class Budget:
    """What compiling one `.proto` may take: seconds, and bytes written per file."""

    timeout_s: float = DEFAULT_PROTOC_TIMEOUT_S
    max_bytes: int = DEFAULT_PROTOC_MAX_BYTES


DEFAULT_BUDGET = Budget()


class ProtobufReader:
    """The messages of one schema, and how to read each as proto3 JSON."""

    def __init__(
        self, text: str, references: tuple[tuple[str, str], ...] = (), budget: Budget = DEFAULT_BUDGET
    ) -> None:
        files = _descriptors(text, references, budget)
        pool = descriptor_pool.DescriptorPool()
        try:
            for proto in files:
                pool.Add(proto)
            self.file = pool.FindFileByName(files[-1].name)
        except Exception as exc:  # a descriptor set that does not link: types it names and does not have
            raise SchemaError(f"the Protobuf schema does not link: {exc}") from None
        self._top = [self.file.message_types_by_name[proto.name] for proto in files[-1].message_type]
        self._classes: dict[str, type[message.Message]] = {}

    def by_indexes(self, indexes: tuple[int, ...]) -> Descriptor:
        """The message a framed record names by its message indexes (the path from the file's first level)."""
        try:
            found = self._top[indexes[0]]
            for index in indexes[1:]:
                found = found.nested_types[index]
        except IndexError:
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"no message at indexes {list(indexes)}") from None
        return found

    def by_name(self, record: str | None) -> Descriptor:
        """The message named `record` (fully qualified, or relative to the file's package); the file's first
        message when no record is named."""
        if record is None:
            if not self._top:
                raise DecodeError(Reason.SCHEMA_MISMATCH, "the schema has no message")
            return self._top[0]
        package = self.file.package
        for name in (record.lstrip("."), f"{package}.{record}" if package else record):
            try:
                return self.file.pool.FindMessageTypeByName(name)
            except KeyError:
                continue
        raise DecodeError(Reason.SCHEMA_MISMATCH, f"no message {record!r} in the schema")

    def read(self, descriptor: Descriptor, payload: bytes | memoryview) -> Any:
        cls = self._classes.get(descriptor.full_name)
        if cls is None:
            cls = self._classes[descriptor.full_name] = message_factory.GetMessageClass(descriptor)
        decoded = cls()
        try:
            decoded.ParseFromString(bytes(payload))
        except message.DecodeError as exc:
            reason = Reason.TRUNCATED if cut_short(payload) else Reason.INVALID
            raise DecodeError(reason, f"not a {descriptor.full_name}: {exc}") from None
        try:
            return json_format.MessageToDict(decoded)
        except Exception as exc:
            raise DecodeError(Reason.INVALID, f"no proto3 JSON for it: {exc}") from None


def reader(text: str, references: tuple[tuple[str, str], ...] = (), budget: Budget = DEFAULT_BUDGET) -> ProtobufReader:
    """The reader of a schema, made once per schema text and imports; a schema that does not compile (or not
    within its budget) is refused each time from what protoc said the first time (a broken schema in a registry
    would otherwise start protoc once per record)."""
    found = _reader_or_error(text, references, budget)
    if isinstance(found, SchemaError):
        raise SchemaError(str(found))
    return found


@lru_cache(maxsize=256)
def _reader_or_error(
    text: str, references: tuple[tuple[str, str], ...], budget: Budget
) -> ProtobufReader | SchemaError:
    try:
        with schema_work():
            return ProtobufReader(text, references, budget)
    except SchemaError as exc:
        return exc


def cut_short(payload: bytes | memoryview) -> bool:
    """Whether the message's wire format runs past its end: a varint, a fixed-width value or a length-delimited
    field that the payload stops inside of. protobuf only says "corrupt", and a cut record is worth telling."""
    data = bytes(payload)
    position, end = 0, len(data)

    def varint() -> int | None:
        nonlocal position
        value, shift = 0, 0
        while position < end:
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:  # noqa: PLR2004
                return value
            shift += 7
        return None

    while position < end:
        key = varint()
        if key is None:
            return True
        wire_type = key & 7
        if wire_type == 0:
            if varint() is None:
                return True
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        elif wire_type == 2:  # noqa: PLR2004
            length = varint()
            if length is None:
                return True
            position += length
        else:  # groups: not a proto3 message's, and not worth following
            return False
    return position > end


def _descriptors(
    text: str, references: tuple[tuple[str, str], ...], budget: Budget
) -> list[descriptor_pb2.FileDescriptorProto]:
    """The file's descriptor last, after every file it imports."""
    serialized = _serialized(text)
    if serialized is None:
        return _compile(text, references, budget)
    files: list[descriptor_pb2.FileDescriptorProto] = []
    given: set[str] = set()
    for name, imported in references:
        proto = _serialized(imported)
        if proto is None:
            files.extend(item for item in _compile(imported, (), budget) if item.name not in given)
        else:
            proto.name = name
            files.append(proto)
        given.update(item.name for item in files)
    for dependency in serialized.dependency:
        if dependency not in given and dependency in _WELL_KNOWN:
            known = descriptor_pb2.FileDescriptorProto()
            _WELL_KNOWN[dependency].CopyToProto(known)
            files.insert(0, known)
            given.add(dependency)
    return [*files, serialized]


def _serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor `text` is the base64 of, or None for `.proto` text (which always holds a space or `;`)."""
    if not _BASE64.fullmatch(text):
        return None
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=False))
    except (binascii.Error, ValueError, message.DecodeError):
        return None
    if not proto.name:
        proto.name = MAIN_FILE
    return proto


def _compile(
    text: str, references: tuple[tuple[str, str], ...], budget: Budget
) -> list[descriptor_pb2.FileDescriptorProto]:
    names = [name for name, _ in references]
    if any(not _safe(name) for name in names):
        raise SchemaError(f"an import name that is not a relative path: {names}")
    main = MAIN_FILE if MAIN_FILE not in names else "_schema_.proto"
    with tempfile.TemporaryDirectory(prefix="proto-") as tmp:
        root = Path(tmp) / "src"
        for name, imported in ((main, text), *references):
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(imported, encoding="utf-8")
        out, errors_file = Path(tmp) / "descriptors.pb", Path(tmp) / "errors.txt"
        command = [
            sys.executable,
            "-c",
            _CHILD,
            str(budget.max_bytes),
            f"--proto_path={root}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            str(root / main),
        ]
        with errors_file.open("wb") as stderr:
            try:
                done = subprocess.run(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                    timeout=budget.timeout_s, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise SchemaError(f"protoc did not compile the schema within {budget.timeout_s:g} s") from None
        if done.returncode != 0:
            if done.returncode == -signal.SIGXFSZ:
                raise SchemaError(f"protoc's output for the schema went over {budget.max_bytes} bytes")
            with errors_file.open("rb") as said:
                errors = said.read(MAX_ERROR_BYTES).decode("utf-8", "replace").replace(f"{root}/", "").strip()
            raise SchemaError(f"the .proto does not compile: {errors or f'protoc exited {done.returncode}'}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return list(files)


def _safe(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and "\\" not in name
