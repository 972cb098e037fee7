"""The AsyncAPI 3.0 export of the routes."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import call_command

from bindings.asyncapi import export_asyncapi
from bindings.selectors import EVENT_ID_KEY_AND_ETAG
from bindings.services import do_put_route

pytestmark = pytest.mark.django_db


def test_each_path_is_a_channel_with_its_parameters_and_a_receive_operation() -> None:
    do_put_route(name="items", paths=["/items", "/items/{id}"], topic="items", event_id=EVENT_ID_KEY_AND_ETAG)
    do_put_route(name="orders", path="/orders/{region}/{status}", topic="orders-${params.region}", position=1)
    document = export_asyncapi("https://sse.example.com")
    assert document["asyncapi"] == "3.0.0"
    assert document["servers"] == {"platform": {"host": "sse.example.com", "protocol": "https"}}
    channels = document["channels"]
    assert [(cid, c["address"]) for cid, c in channels.items()] == [
        ("items", "/items"), ("items-1", "/items/{id}"), ("orders", "/orders/{region}/{status}")
    ]  # fmt: skip
    assert "parameters" not in channels["items"]
    assert sorted(channels["orders"]["parameters"]) == ["region", "status"]
    assert channels["items-1"]["x-sse-kafka"]["event-id"] == "key-and-etag"
    assert channels["orders"]["x-sse-kafka"]["topic"] == "orders-${params.region}"
    for channel_id in channels:
        operation = document["operations"][f"receive-{channel_id}"]
        assert operation["action"] == "receive"
        assert operation["channel"] == {"$ref": f"#/channels/{channel_id}"}
        for ref in operation["messages"]:  # every reference points at a message that exists
            _, _, cid, _, name = ref["$ref"].split("/")
            assert name in channels[cid]["messages"]


def test_the_command_prints_yaml() -> None:
    do_put_route(name="items", path="/items", topic="items")
    out = StringIO()
    call_command("asyncapi_export", "--server", "http://127.0.0.1:8000", stdout=out)
    assert yaml.safe_load(out.getvalue())["channels"]["items"]["address"] == "/items"
