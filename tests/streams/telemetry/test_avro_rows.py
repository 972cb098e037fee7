"""The delivery log's rows written by `RowEncoder` are byte for byte what fastavro writes for them, and read back."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from streams.telemetry.avro_rows import RowEncoder, long, varint
from streams.telemetry.delivery_schema import (
    DELIVERIES,
    REFUSALS,
    REPORTS,
    SCHEMA_VERSION,
    SCHEMAS,
    SESSIONS,
    avro_batch_schema,
)

COMMON = {"schema_version": SCHEMA_VERSION, "node": "node-é", "pid": 4_000_000, "process": "node-1-abc"}
# Values at the varints' byte boundaries, both signs, and past 32 bits (a timestamp in milliseconds).
NUMBERS = [0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8193, 2**31 - 1, -(2**31), 1_765_000_000_000, 2**62, -(2**62)]
TIMES = [0, 1, 63, 64, 8192, 1_765_000_000_000, 253_402_300_799_000]  # ms since 1970, up to the end of 9999
STRINGS = ["", "a", "/orders/12", "é", "数据流", "x" * 63, "x" * 64, "y" * 8191, "z" * 9000, "\U0001f600"]


def fastavro_bytes(table: str, rows: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(
        buffer, fastavro.parse_schema(avro_batch_schema(table)), [{**COMMON, **row} for row in rows]
    )
    return buffer.getvalue()


def random_row(table: str, rng: random.Random) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for field in SCHEMAS[table]:
        if field.name in COMMON or rng.random() < 0.2:
            continue  # the process's columns come from the encoder; a missing column is null
        if rng.random() < 0.2:
            row[field.name] = None
        elif pa.types.is_string(field.type):
            row[field.name] = rng.choice(STRINGS)
        elif pa.types.is_timestamp(field.type):
            row[field.name] = rng.choice(TIMES)
        elif pa.types.is_int16(field.type):
            row[field.name] = rng.choice([n for n in NUMBERS if -(2**15) <= n < 2**15])
        elif pa.types.is_int32(field.type):
            row[field.name] = rng.choice([n for n in NUMBERS if -(2**31) <= n < 2**31])
        else:
            row[field.name] = rng.choice(NUMBERS)
    return row


@pytest.mark.parametrize("table", [SESSIONS, REFUSALS, REPORTS])
def test_rows_are_written_as_fastavro_writes_them(table: str) -> None:
    rng = random.Random(table)
    encoder = RowEncoder(SCHEMAS[table], COMMON)
    for size in (0, 1, 2, 63, 64, 65, 500):
        rows = [random_row(table, rng) for _ in range(size)]
        written = encoder.encode(rows)
        assert written == fastavro_bytes(table, rows), size
        read = list(fastavro.schemaless_reader(io.BytesIO(written), avro_batch_schema(table), None))  # type: ignore[arg-type]
        assert len(read) == size
        for row, back in zip(rows, read, strict=True):
            for field in SCHEMAS[table]:
                expected = COMMON.get(field.name, row.get(field.name))
                value = back[field.name]
                if pa.types.is_timestamp(field.type) and value is not None:
                    value = int(value.timestamp() * 1000)  # fastavro reads a timestamp as a datetime
                assert value == expected, field.name


def test_a_process_column_left_null_is_written_null() -> None:
    encoder = RowEncoder(SCHEMAS[REPORTS], {**COMMON, "node": None})
    assert encoder.encode([{"at": 5, "interval_ms": 15_000, "open": 3}]) == fastavro_bytes(
        REPORTS, [{"node": None, "at": 5, "interval_ms": 15_000, "open": 3}]
    )


def test_a_table_with_maps_is_left_to_fastavro() -> None:
    assert not RowEncoder.supports(SCHEMAS[DELIVERIES])
    with pytest.raises(TypeError, match="latency"):
        RowEncoder(SCHEMAS[DELIVERIES], COMMON)


def test_longs_are_zigzag_varints() -> None:
    assert [long(n) for n in (0, -1, 1, -2, 63, -64, 64)] == [
        b"\x00",
        b"\x01",
        b"\x02",
        b"\x03",
        b"\x7e",
        b"\x7f",
        b"\x80\x01",
    ]
    assert varint(300) == b"\xac\x02"
