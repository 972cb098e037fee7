"""Floats as JSON: NaN and the infinities, which JSON has no numbers for, and 32-bit floats printed short."""

from __future__ import annotations

import math
import struct

_FLOAT32 = struct.Struct(">f")


def non_finite(value: float) -> str:
    """NaN and the infinities as proto3 JSON writes them: JSON has no numbers for them."""
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def shortest_float32(value: float) -> float:
    """The double with the shortest decimal form that is the same 32-bit float as `value` (0.1, not
    0.10000000149011612), the way Java and proto3 JSON print a float."""
    exact = _FLOAT32.pack(value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if _FLOAT32.pack(candidate) == exact:
            return candidate
    return value
