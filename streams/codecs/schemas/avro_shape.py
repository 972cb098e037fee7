"""The layout of an Avro schema's records (`Shape`), enough to walk a record without building its value, so that it
is checked against the limits (limits.py) before fastavro reads it: fastavro's reader recurses in C with no bound
of its own, and a record nested 20 000 deep would crash the process.

A schema that could break no bound (not recursive, no deeper than `max_depth`, no arrays or maps in a record
longer than `max_items` bytes) has its records never walked. A walk (`_Walk`) builds nothing: it is `too-large` as
soon as a record nests deeper or holds more items than the limits allow, `truncated` or `invalid` where fastavro
would fail too, and its own recursion is bounded by `max_depth`.
"""

from __future__ import annotations

from typing import Any

from streams.codecs.schemas.errors import DecodeError, Reason
from streams.codecs.schemas.limits import Limits

_VARINT, _BOOLEAN, _FLOAT, _DOUBLE, _BYTES, _FIXED, _RECORD, _ARRAY, _MAP, _UNION, _NULL = range(11)
_PRIMITIVE_KINDS = {
    "null": _NULL, "boolean": _BOOLEAN, "int": _VARINT, "long": _VARINT, "float": _FLOAT, "double": _DOUBLE,
    "bytes": _BYTES, "string": _BYTES,
}  # fmt: skip


class Shape:
    """How a schema's records are laid out, enough to walk one without building its value: how deep it nests and
    how many items it holds, checked against the limits before fastavro reads it (fastavro's reader recurses in C,
    with no bound of its own). Built once per schema; `check` walks a record only when the schema could break a
    bound (see the module's docstring), so most schemas' records are never walked."""

    def __init__(self, schema: Any, named: dict[str, Any]) -> None:
        self._named = named
        self._nodes: dict[str, list[Any]] = {}
        self._depths: dict[str, int] = {}
        self._visiting: set[str] = set()
        self.recursive = False
        self.containers = False  # arrays or maps: as many items as bytes
        self._root, self.depth = self._node(schema)

    def _node(self, schema: Any) -> tuple[list[Any], int]:
        """The node of `schema`, as [kind, argument], and how deep its values nest (records, arrays, maps)."""
        if isinstance(schema, str):
            if schema in _PRIMITIVE_KINDS:
                return [_PRIMITIVE_KINDS[schema], None], 0
            if schema in self._visiting:
                self.recursive = True
                return self._nodes[schema], 0
            if schema in self._nodes:
                return self._nodes[schema], self._depths[schema]
            return self._node(self._named[schema])
        if isinstance(schema, list):
            branches = [self._node(branch) for branch in schema]
            return [_UNION, [node for node, _ in branches]], max((depth for _, depth in branches), default=0)
        kind = schema["type"]
        if kind in ("record", "error"):
            name = schema["name"]
            node: list[Any] = [_RECORD, []]
            self._nodes[name] = node
            self._visiting.add(name)
            fields = [self._node(field["type"]) for field in schema["fields"]]
            self._visiting.discard(name)
            node[1] = [found for found, _ in fields]
            depth = 1 + max((inner for _, inner in fields), default=0)
            self._depths[name] = depth
            return node, depth
        if kind in ("array", "map"):
            self.containers = True
            inner, depth = self._node(schema["items" if kind == "array" else "values"])
            return [_ARRAY if kind == "array" else _MAP, inner], depth + 1
        if kind == "fixed":
            node = [_FIXED, schema["size"]]
        elif kind == "enum":
            node = [_VARINT, None]
        elif isinstance(kind, str) and kind in _PRIMITIVE_KINDS:
            return [_PRIMITIVE_KINDS[kind], None], 0
        else:
            return self._node(kind)
        if isinstance(schema.get("name"), str):
            self._nodes[schema["name"]] = node
            self._depths[schema["name"]] = 0
        return node, 0

    def check(self, payload: bytes | memoryview, limits: Limits) -> None:
        limits.check_size(payload)
        if self.recursive or self.depth > limits.max_depth or (self.containers and len(payload) > limits.max_items):
            _Walk(memoryview(payload), limits).node(self._root, 1)


class _Walk:
    """One record walked along its schema's nodes without building anything: `too-large` as soon as it nests
    deeper or holds more items than the limits allow, `truncated` or `invalid` where fastavro would fail too. Its
    recursion is bounded by `max_depth` (every record, array and map is a level)."""

    def __init__(self, data: memoryview, limits: Limits) -> None:
        self.data, self.limits = data, limits
        self.position = 0
        self.items = 0

    def node(self, node: list[Any], depth: int) -> None:
        kind, argument = node
        if kind == _VARINT:
            self.long()
        elif kind == _BYTES:
            self.skip(self.long())
        elif kind == _RECORD:
            self.level(depth)
            for field in argument:
                self.node(field, depth + 1)
        elif kind == _UNION:
            index = self.long()
            if not 0 <= index < len(argument):
                raise DecodeError(Reason.INVALID, f"union branch {index} of {len(argument)}")
            self.node(argument[index], depth)
        elif kind in (_ARRAY, _MAP):
            self.level(depth)
            self.blocks(argument, depth, kind == _MAP)
        elif kind != _NULL:
            self.skip({_BOOLEAN: 1, _FLOAT: 4, _DOUBLE: 8, _FIXED: argument}[kind])

    def level(self, depth: int) -> None:
        if depth > self.limits.max_depth:
            raise DecodeError(Reason.TOO_LARGE, f"nested deeper than {self.limits.max_depth}")

    def blocks(self, inner: list[Any], depth: int, keyed: bool) -> None:
        while count := self.long():
            if count < 0:  # a block with its size in bytes after its count
                count = -count
                self.long()
            self.items += count
            if self.items > self.limits.max_items:
                raise DecodeError(Reason.TOO_LARGE, f"over {self.limits.max_items} items")
            for _ in range(count):
                if keyed:
                    self.skip(self.long())
                self.node(inner, depth + 1)

    def long(self) -> int:
        value = shift = 0
        data, position = self.data, self.position
        for offset in range(10):
            if position + offset >= len(data):
                raise DecodeError(Reason.TRUNCATED, "the Avro payload ends early")
            byte = data[position + offset]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:  # noqa: PLR2004
                self.position = position + offset + 1
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise DecodeError(Reason.INVALID, "a varint over 10 bytes")

    def skip(self, size: int) -> None:
        if size < 0:
            raise DecodeError(Reason.INVALID, f"a length of {size}")
        self.position += size
        if self.position > len(self.data):
            raise DecodeError(Reason.TRUNCATED, "the Avro payload ends early")
