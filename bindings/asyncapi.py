"""An AsyncAPI 3.0 document of the routes: what a client can subscribe to, and what it receives.

Each path pattern of a route is a channel (its `{name}` segments are channel parameters) with one `receive`
operation. Messages are SSE events whose data is the Kafka value; the topic, filters and event-id format are
recorded under `x-sse-kafka` so the document says where the data comes from.
"""

from __future__ import annotations

from typing import Any

from bindings.models import EVENT_ID_KEY_AND_ETAG, routes_in_order
from bindings.patterns import parse_path

EVENT_MESSAGE = {
    "name": "event",
    "title": "A Kafka message",
    "summary": "`data:` is the message value; `id:` resumes the stream exactly after it (Last-Event-ID).",
    "contentType": "text/event-stream",
    "payload": {"type": "string"},
}
DELETE_MESSAGE = {
    "name": "delete",
    "title": "A Kafka tombstone",
    "summary": "`event:delete`, `data:` is the base64url key of the deleted record.",
    "contentType": "text/event-stream",
    "payload": {"type": "string", "contentEncoding": "base64url"},
}


def export_asyncapi(server_url: str, *, title: str = "SSE over Kafka", version: str = "1.0.0") -> dict[str, Any]:
    scheme, _, host = server_url.partition("://")
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for route in routes_in_order():
        filters = [
            {"key": f.key, "headers": dict(f.headers or {}), "value": f.value_path or None} for f in route.filters.all()
        ]
        for index, condition in enumerate(route.conditions.all()):
            channel_id = route.name if index == 0 else f"{route.name}-{index}"
            params = sorted(name for name, is_param in parse_path(condition.path).segments if is_param)
            channel: dict[str, Any] = {
                "address": condition.path,
                "title": f"route {route.name}",
                "messages": {"event": EVENT_MESSAGE, "delete": DELETE_MESSAGE},
                "x-sse-kafka": {
                    "topic": route.topic,
                    "filters": filters,
                    "event-id": "key-and-etag" if route.event_id == EVENT_ID_KEY_AND_ETAG else "etag",
                    "start": route.start,
                },
            }
            if params:
                channel["parameters"] = {name: {"description": f"path segment {{{name}}}"} for name in params}
            channels[channel_id] = channel
            operations[f"receive-{channel_id}"] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{channel_id}"},
                "messages": [
                    {"$ref": f"#/channels/{channel_id}/messages/event"},
                    {"$ref": f"#/channels/{channel_id}/messages/delete"},
                ],
            }
    return {
        "asyncapi": "3.0.0",
        "info": {"title": title, "version": version},
        "defaultContentType": "text/event-stream",
        "servers": {"platform": {"host": host or scheme, "protocol": scheme if host else "http"}},
        "channels": channels,
        "operations": operations,
    }
