"""The models without a schema: text in a character set, and numbers as Kafka's own serializers write them.

`int32` and `int64` are two's complement, `float` and `double` IEEE 754, all big-endian and of exactly their width
(Kafka's IntegerSerializer, LongSerializer, FloatSerializer and DoubleSerializer). A `string` is decoded with its
model's encoding and written as a JSON string.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable

from bindings.schemas import encoding_problem
from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.floats import non_finite, shortest_float32

ToJson = Callable[[bytes | memoryview], bytes]

_NUMBERS = {
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float": struct.Struct(">f"),
    "double": struct.Struct(">d"),
}


def number(model: str) -> ToJson:
    layout = _NUMBERS[model]
    single = model == "float"

    def to_json(raw: bytes | memoryview) -> bytes:
        if len(raw) != layout.size:
            raise DecodeError(Reason.INVALID, f"{len(raw)} bytes for a {layout.size}-byte {model}")
        (value,) = layout.unpack(raw)
        if isinstance(value, float):
            if not math.isfinite(value):
                return b'"%s"' % non_finite(value).encode()
            if single:
                value = shortest_float32(value)
        return repr(value).encode()

    return to_json


def string(encoding: str) -> ToJson:
    """Text in `encoding`, which must be a character set of stored text (bindings/schemas.py: Python's transforms
    such as `hex` and its special encodings such as `punycode`, quadratic in the text, are refused)."""
    if problem := encoding_problem(encoding):
        raise SchemaError(problem)

    def to_json(raw: bytes | memoryview) -> bytes:
        try:
            text = bytes(raw).decode(encoding)
        except UnicodeError as exc:  # UnicodeDecodeError, and the plain UnicodeError some codecs raise
            raise DecodeError(Reason.INVALID, f"not {encoding}: {getattr(exc, 'reason', exc)}") from None
        return json.dumps(text, ensure_ascii=False).encode()

    return to_json
