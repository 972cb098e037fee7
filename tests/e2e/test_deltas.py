"""Deltas on a live server and Kafka (docs/contract.md §7): with `?delta=merge-patch` a key's value goes whole once,
then as `event:patch`, an RFC 7396 merge patch from the value last sent, when shorter; ids name the key; a resume
starts again from whole values; another delta format is a `400` naming the parameter."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bindings.services import do_put_route
from tests.conftest import unique
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

BASE: dict[str, Any] = {
    "id": "EURUSD",
    "bid": 1.0801,
    "ask": 1.0803,
    "venue": "x" * 300,
    "book": {"depth": 5, "levels": [1, 2]},
}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7396, as a client applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge(result.get(name), value)
    return result


def updates() -> list[dict[str, Any]]:
    """Values changing one field at a time."""
    found: list[dict[str, Any]] = []
    value = dict(BASE)
    for n in range(6):
        value = dict(value)
        if n % 3 == 0:
            value["bid"] = round(value["bid"] + 0.0001, 4)
        elif n % 3 == 1:
            value["book"] = {**value["book"], "depth": value["book"]["depth"] + 1}
        else:
            value.pop("venue", None) if "venue" in value else value.update(venue="y")
        found.append(value)
    return found


def test_patches_applied_in_order_give_the_values_produced_and_a_resume_starts_whole(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, path = new_topic(), "/" + unique("quotes")
    do_put_route(name=path[1:], path=path, topic=topic)
    produced = updates()
    for value in produced:
        produce(topic, json.dumps(value).encode(), key=b"EURUSD")

    held: dict[str, Any] = {}
    got, kinds = [], []
    last_id = ""
    with EventStream(f"{daphne_url}{path}?delta=merge-patch", timeout=20) as stream:
        for event in stream.events(len(produced), timeout=20):
            key = json.loads(event.id or "")[0]
            assert base64.urlsafe_b64decode(key) == b"EURUSD"
            kinds.append(event.event or "message")
            held[key] = merge(held[key], json.loads(event.text)) if event.event == "patch" else json.loads(event.text)
            got.append(held[key])
            last_id = event.id or ""
    assert kinds == ["message"] + ["patch"] * (len(produced) - 1)
    assert got == produced

    produce(topic, json.dumps({**produced[-1], "ask": 1.09}).encode(), key=b"EURUSD")
    with EventStream(f"{daphne_url}{path}?delta=merge-patch", headers={"last-event-id": last_id}) as resumed:
        event = resumed.next_event(timeout=20)
    assert event.event is None
    assert json.loads(event.text) == {**produced[-1], "ask": 1.09}


def test_another_delta_format_is_a_400_naming_the_parameter(daphne_url: str, new_topic: Callable[..., str]) -> None:
    topic, path = new_topic(), "/" + unique("quotes")
    do_put_route(name=path[1:], path=path, topic=topic)
    response = httpx.get(f"{daphne_url}{path}?delta=json-patch", timeout=10)
    assert response.status_code == 400
    assert response.json()["parameter"] == "delta"
    assert "'json-patch'" in response.json()["detail"]
