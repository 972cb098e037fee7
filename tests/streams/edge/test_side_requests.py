"""The requests on a stream path that open no stream (streams/edge/side_requests.py), in process with a fake
runtime: a CORS preflight, a challenge response, another method; a GET or HEAD is left to the stream."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from streams.edge.side_requests import MAX_CHALLENGE_BODY_BYTES, side_request

ORIGIN = b"https://app.example"


class Runtime:
    """What side_request uses of the runtime: the route table, the refusal count, the challenge rate, renewals."""

    def __init__(self, *, route: bool = True, wait: float = 0.0) -> None:
        endpoint = SimpleNamespace(cors_origins=[ORIGIN.decode()], cors_credentials=False)
        matched = SimpleNamespace(route=SimpleNamespace(name="items", endpoint=endpoint)) if route else None
        self.refusals: list[tuple[str, int, str]] = []
        self.broadcasts: list[str] = []

        async def match(path: str) -> Any:
            return matched

        async def broadcast(token: str) -> None:
            self.broadcasts.append(token)

        self.routes = SimpleNamespace(match=match, guards=list)
        self.challenges = SimpleNamespace(take=lambda key: wait)
        self.renewals = SimpleNamespace(broadcast=broadcast)

    def refused(self, route: str, status: int, reason: str) -> None:
        self.refusals.append((route, status, reason))


def scope(method: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": "/items", "headers": headers or [], "client": ("10.0.0.1", 1)}


async def answer(request: dict[str, Any], runtime: Runtime, body: bytes = b"") -> tuple[bool, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    handled = await side_request(request, receive, send, "/items", runtime)  # type: ignore[arg-type]
    return handled, sent


def status(sent: list[dict[str, Any]]) -> int:
    return int(sent[0]["status"])


def headers(sent: list[dict[str, Any]]) -> dict[bytes, bytes]:
    return dict(sent[0]["headers"])


CHALLENGE = (b"content-type", b"application/x-challenge-response")


@pytest.mark.asyncio
@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_get_or_head_is_left_to_the_stream(method: str) -> None:
    assert await answer(scope(method), Runtime()) == (False, [])


@pytest.mark.asyncio
async def test_another_method_is_a_405_naming_the_allowed_ones() -> None:
    runtime = Runtime()
    handled, sent = await answer(scope("DELETE"), runtime)
    assert handled
    assert status(sent) == 405
    assert headers(sent)[b"allow"] == b"GET, HEAD, OPTIONS"
    assert runtime.refusals == [("", 405, "method")]


@pytest.mark.asyncio
async def test_a_preflight_gets_the_endpoints_cors_headers_or_a_404_without_a_route() -> None:
    request = scope("OPTIONS", [(b"origin", ORIGIN), (b"access-control-request-headers", b"authorization")])
    _, sent = await answer(request, Runtime())
    assert status(sent) == 204
    assert headers(sent)[b"access-control-allow-origin"] == ORIGIN
    assert headers(sent)[b"access-control-allow-headers"] == b"authorization"

    _, sent = await answer(request, Runtime(route=False))
    assert status(sent) == 404
    assert json.loads(sent[1]["body"])["title"] == "No route"


@pytest.mark.asyncio
async def test_a_challenge_response_without_a_token_is_a_204_that_renews_nothing() -> None:
    runtime = Runtime()
    _, sent = await answer(scope("POST", [CHALLENGE, (b"origin", ORIGIN)]), runtime)
    assert status(sent) == 204
    assert headers(sent)[b"access-control-allow-origin"] == ORIGIN
    assert runtime.broadcasts == []


@pytest.mark.asyncio
async def test_a_challenge_response_with_a_body_past_the_bound_or_past_the_rate_is_refused() -> None:
    runtime = Runtime()
    _, sent = await answer(scope("POST", [CHALLENGE]), runtime, body=b"x" * (MAX_CHALLENGE_BODY_BYTES + 1))
    assert status(sent) == 413
    assert runtime.refusals == [("items", 413, "body_too_large")]

    runtime = Runtime(wait=2.5)
    _, sent = await answer(scope("POST", [CHALLENGE]), runtime)
    assert status(sent) == 429
    assert headers(sent)[b"retry-after"] == b"3"
    assert runtime.refusals == [("items", 429, "challenge_rate")]
