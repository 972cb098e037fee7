"""Logs: JSON lines with the request's id, access lines without query strings, and a token that appears nowhere
an operator reads: not in the logs (at DEBUG), not in the API's answers, not in /metrics."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

import httpx
import pytest
from django.test import Client

from bindings.services import do_put_guard, do_put_route
from config.logs import JsonFormatter, RequestIdFilter, new_request_id, request_id
from tests.conftest import unique
from tests.support.jwt_keys import guard_fields, token
from tests.support.servers import start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_safe_client_request_id_is_kept_and_any_other_replaced() -> None:
    assert new_request_id(b"edge-7f3a.1:2") == "edge-7f3a.1:2"
    for unsafe in (b"", b"a b", b"x" * 65, b"id\nforged log line", "é".encode(), None):
        made = new_request_id(unsafe)
        assert len(made) == 16
        assert made.isalnum()
    assert len({new_request_id(None) for _ in range(1000)}) == 1000  # random, never repeated


def test_a_json_record_carries_the_request_id_and_the_exception() -> None:
    record = logging.LogRecord("streams", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
    token_ = request_id.set("req-1")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id.reset(token_)
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed here"
    assert entry["request_id"] == "req-1"
    assert entry["level"] == "ERROR"
    assert "ValueError: boom" in entry["exception"]


def test_a_token_stays_out_of_logs_api_output_and_metrics(
    new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], admin_client: Client
) -> None:
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard, challenge_s=1))
    path = "/" + unique("tok")
    topic = new_topic()
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]})
    secret = token("alice")
    signature = secret.rsplit(".", 1)[1]
    server = start_daphne({"LOG_FORMAT": "json", "LOG_LEVEL": "DEBUG"}, log_name="test-daphne-json-logs")
    try:
        with EventStream(f"{server.url}{path}?access_token={secret}", headers={"x-request-id": "trace-42"}) as stream:
            assert stream.response.headers["x-request-id"] == "trace-42"
            produce(topic, b"hello")
            assert stream.next_event().text == "hello"
        with EventStream(server.url + path, headers={"authorization": f"Bearer {secret}"}) as stream:
            produce(topic, b"again")
            assert stream.next_event().text == "hello"
        refused = httpx.get(f"{server.url}{path}?access_token={secret[:-3]}abc", timeout=10)
        assert refused.status_code == 401
        challenge = {"content-type": "application/x-challenge-response", "authorization": f"Bearer {secret}"}
        assert httpx.post(server.url + path, headers=challenge, timeout=10).status_code == 204
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()

    lines = server.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    access = [r for r in records if r["logger"] == "access" and r.get("path") == path]
    # Two streams closed by their clients, a refusal, a challenge response; none with a query string.
    assert sorted((r["method"], r["status"], r.get("end")) for r in access) == [
        ("GET", 200, "client_gone"), ("GET", 200, "client_gone"), ("GET", 401, None), ("POST", 204, None),
    ]  # fmt: skip
    assert all("?" not in r["message"] for r in access)
    traced = [r for r in records if r["request_id"] == "trace-42"]
    assert any(r.get("events") == 1 and r["route"] == path[1:] for r in traced)
    assert any(r["logger"].startswith("streams") for r in records), "the platform's own records are JSON too"

    answers = [admin_client.get(f"/api/v1/{what}/").content.decode() for what in ("routes", "guards", "changes")]
    for place, text in {"log": "\n".join(lines), "metrics": metrics, "api": "\n".join(answers)}.items():
        assert secret not in text, place
        assert signature not in text, place
