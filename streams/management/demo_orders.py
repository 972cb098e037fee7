"""The demo's Avro topic: the schema of its orders, where demo_setup keeps it, and the orders demo_producer writes.

The schema holds one of each thing decoding turns into JSON (docs/schemas.md, "Avro values"): a union with null,
a timestamp-millis, a decimal on bytes, an enum and a nested record. It is kept in an inline catalog, so the
records are the plain Avro encoding (fastavro's `schemaless_writer`), with no registry framing.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import fastavro

CATALOG = "demo"
ROUTE = "demo-orders"
STATUSES = ("PLACED", "PAID", "SHIPPED")
CUSTOMERS = (("Ada", "London"), ("Grace", "New York"), ("Linus", "Helsinki"))

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "demo",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": list(STATUSES)}},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [{"name": "name", "type": "string"}, {"name": "city", "type": "string"}],
            },
        },
    ],
}
SCHEMA_TEXT = json.dumps(SCHEMA, indent=2)
_PARSED = fastavro.parse_schema(SCHEMA)


def subject(topic: str) -> str:
    """The subject the topic model's `strategy: topic` reads the value's schema from."""
    return f"{topic}-value"


def order(sequence: int, *, at: datetime | None = None) -> dict[str, Any]:
    """The `sequence`th demo order, as fastavro writes it (Python values: datetime, Decimal, None)."""
    name, city = CUSTOMERS[sequence % len(CUSTOMERS)]
    return {
        "id": f"o-{sequence}",
        "note": "leave at the door" if sequence % 3 == 0 else None,
        "placed_at": at or datetime.now(UTC),
        "total": Decimal(sequence % 50 * 100 + 1250).scaleb(-2),
        "status": STATUSES[sequence % len(STATUSES)],
        "customer": {"name": name, "city": city},
    }


def encode(record: dict[str, Any]) -> bytes:
    """The record in the plain Avro binary encoding of `SCHEMA` (an inline catalog's records carry no framing)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED, record)
    return out.getvalue()
