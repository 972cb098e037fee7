"""What a route does to its topic's recent records, for the route page's live preview (docs/control-plane.md, "The
admin"): the last records of each partition as the topic holds them (decoded as every stream gets them) beside
what the route sends of each, its filters, fields and conflation applied.

An admin view served by the data plane, since only it reads Kafka: an async Django view on the worker's own event
loop, which reads through a short-lived historical reader (its consumer lives in the worker's consumer host, which
decodes with the route table's models, so no record is decoded here) and lets it go. Staff with `view_route` only.
It decides nothing for streams: filters that read a token's values (templates or expressions naming `guarded`) are
not applied here, each record then "depends on the token"; conflation is replayed on the records' timestamps, where
a stream would use the time they arrive.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, JsonResponse

from streams.access.guards import route_guard_values
from streams.edge.runtime import runtime as process_runtime
from streams.events.conflation import Conflation
from streams.kafka.client import HistoricalReader, KafkaUnavailableError, Record, TopicNotFoundError
from streams.routes.filters import compile_filters, matches_any
from streams.routes.projection import projection

PER_PARTITION = 20  # the last records of each partition shown
SHOWN_BYTES = 2000  # of each value
READ_S = 5.0


async def recent_records(request: HttpRequest, name: str) -> JsonResponse:
    """`GET /admin/recent-records/<route>?path=<a path of the route>`: the topic's recent records and their fate."""
    user = await request.auser()
    if not (user.is_active and user.is_staff and await sync_to_async(user.has_perm)("bindings.view_route")):
        return _problem(403, "Forbidden", "Staff with bindings.view_route only.")
    runtime = process_runtime
    path = request.GET.get("path", "")
    matched = next((m for m in await runtime.routes.candidates(path) if m.route.name == name), None)
    if matched is None:
        return _problem(404, "Not found", f"Route {name!r} does not serve {path!r}.")
    hub = runtime.hub()
    try:
        state = await hub.topic(matched.topic)
        marks = await hub.metadata.watermarks(matched.topic, list(state.info.partitions))
        starts = {p: max(w.low, w.high - PER_PARTITION) for p, w in marks.items() if w.high > w.low}
        ends = {p: marks[p].high for p in starts}
        records = await _read(hub.kafka, matched.topic, starts, ends) if starts else []
    except TopicNotFoundError as exc:
        return _problem(404, "Unknown topic", str(exc))
    except KafkaUnavailableError:
        return _problem(503, "Kafka unavailable", "The message broker cannot be reached; retry later.")
    route = matched.route
    reads_token = bool(route_guard_values(route))
    filters = () if reads_token else compile_filters(route.filters, matched.params, None)
    fields = projection(route.fields)
    fates = _conflated(records, route.conflate_ms) if route.conflate_ms else {}
    rows = []
    for record in records:
        passes = matches_any(filters, record)
        fate = fates.get((record.partition, record.offset), "sent") if passes else "filtered out"
        sent = record.value if fields is None else fields.value(record)
        rows.append(
            {
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": None if record.key is None else base64.urlsafe_b64encode(record.key).decode(),
                "value": _text(record.value),
                "fate": f"{fate}, if the token's values pass the filters" if reads_token else fate,
                "sent": _text(sent) if passes else None,
            }
        )
    return JsonResponse({"topic": matched.topic, "fields": list(route.fields), "records": rows})


async def _read(kafka: Any, topic: str, starts: dict[int, int], ends: dict[int, int]) -> list[Record]:
    """The records from `starts` up to `ends`, by timestamp, read within READ_S."""
    reader = HistoricalReader(kafka, topic)
    found: list[Record] = []
    try:
        await asyncio.wait_for(reader.start(starts), READ_S)
        deadline = time.monotonic() + READ_S
        reached = {p for p, end in ends.items() if starts[p] >= end}
        while len(reached) < len(ends) and time.monotonic() < deadline:
            batch = await reader.poll(0.2)
            for record in batch.records:
                if record.offset < ends[record.partition]:
                    found.append(record)
                if record.offset + 1 >= ends[record.partition]:
                    reached.add(record.partition)
            reached.update(p for p, end in batch.eof.items() if end >= ends.get(p, 0))
    finally:
        await reader.close()
    return sorted(found, key=lambda r: (r.timestamp_ms, r.partition, r.offset))


def _conflated(records: list[Record], interval_ms: int) -> dict[tuple[int, int], str]:
    """Each record's fate under conflation, replayed on the records' timestamps."""
    conflation, fates = Conflation(interval_ms), {}
    for record in records:
        now = record.timestamp_ms / 1000
        for due in conflation.due(now):
            fates[(due.partition, due.offset)] = "sent after its key's interval"
        waiting = conflation.waiting.get(record.key) if record.key is not None else None
        if conflation.admit(record, now):
            if waiting is not None:
                fates[(waiting.partition, waiting.offset)] = "conflated away"
        else:
            fates[(record.partition, record.offset)] = "waits for its key's interval"
            if waiting is not None:
                fates[(waiting.partition, waiting.offset)] = "conflated away"
    return fates


def _text(value: bytes | None) -> str | None:
    return None if value is None else value[:SHOWN_BYTES].decode("utf-8", errors="replace")


def _problem(status: int, title: str, detail: str) -> JsonResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JsonResponse(body, status=status, content_type="application/problem+json")
