"""The JavaScript client (streams/static/streams/sse-client.js) in Debian's Chromium against a live daphne.

A TCP proxy in front of daphne keeps every request the browser sends, so the tests see what the server saw (the
token in a header, never in the URL; Last-Event-ID on a resume; the challenge's answer); daphne's JSON access log
says how each stream ended. Tokens come from the test through a function exposed to the page, as a page's own
token callback would fetch them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from playwright.sync_api import Page, Request
from rest_framework.authtoken.models import Token

from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from streams.codecs.event_id import encode_progress
from tests.browser.test_demo import in_browser
from tests.conftest import unique, wait_until
from tests.support.jwt_keys import guard_fields, token
from tests.support.servers import DaphneServer, TcpProxy, _reset, start_daphne

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLIENT = "/static/streams/sse-client.js"
# Opens a client on the page; everything it reports goes to window.seen, in order.
OPEN_CLIENT = """async ({ client, path, options, tokenFromTest }) => {
  const { SseClient } = await import(client);
  window.seen = window.seen || [];
  const token = (reason) => window.freshToken(reason);
  const made = new SseClient(path, tokenFromTest ? { ...options, token } : options);
  window.clients = [...(window.clients || []), made];
  const index = window.clients.length - 1;
  const report = (entry) => window.seen.push({ client: index, ...entry });
  const problem = (error) => error && { status: error.status, title: error.title, detail: error.detail,
    problemType: error.type, retryable: error.retryable };
  for (const type of ["open", "message", "delete", "reset", "caught-up", "challenge", "revoked"]) {
    made.addEventListener(type, (e) => report({ type, data: e.data ?? null, id: e.lastEventId ?? null }));
  }
  made.addEventListener("reconnecting", (e) => report({ type: "reconnecting", attempt: e.detail.attempt,
    delayMs: e.detail.delayMs, error: problem(e.detail.error) }));
  made.addEventListener("renewal", (e) => report({ type: "renewal", ok: e.detail.ok, error: problem(e.detail.error) }));
  made.addEventListener("error", (e) => report({ type: "error", ...problem(e.error), readyState: made.readyState }));
  return made.transport;
}"""


def seen(type_: str, count: int = 1) -> str:
    return f"window.seen.filter((e) => e.type === {json.dumps(type_)}).length >= {count}"


def reports(page: Page) -> list[dict[str, Any]]:
    """What the page's clients reported, in order."""
    found: list[dict[str, Any]] = page.evaluate("window.seen")
    return found


# --------------------------------------------------------------------------
# What the server saw
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SentRequest:
    method: str
    target: str
    headers: dict[str, str]


HEAD = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.DOTALL)


class RecordingProxy(TcpProxy):
    """A `TcpProxy` in front of daphne that keeps the bytes each browser connection sends to it."""

    def __init__(self, target_port: int) -> None:
        self._sent: list[bytearray] = []
        self._lock = threading.Lock()
        super().__init__(target_port)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        if sink.get_extra_info("peername")[1] != self.target_port:
            await super()._pipe(source, sink)
            return
        sent = bytearray()
        with self._lock:
            self._sent.append(sent)
        try:
            while data := await source.read(self.CHUNK):
                with self._lock:
                    sent += data
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            _reset(sink)

    def requests(self, path: str) -> list[SentRequest]:
        """The requests for `path` (any query): connection by connection, in the order each was opened."""
        found = []
        with self._lock:
            connections = [bytes(sent) for sent in self._sent]
        for sent in connections:
            for method, target, head in HEAD.findall(sent):
                lines = head.decode("latin-1").split("\r\n")
                headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
                request = SentRequest(method.decode(), target.decode("latin-1"), headers)
                if request.target.split("?", 1)[0] == path:
                    found.append(request)
        return found


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    """A daphne of its own, logging JSON: its access records say how each stream ended."""
    started = start_daphne({"LOG_FORMAT": "json"}, log_name="test-daphne-js-client")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def proxy(server: DaphneServer) -> Iterator[RecordingProxy]:
    recording = RecordingProxy(server.port)
    try:
        yield recording
    finally:
        recording.close()


def stream_ends(server: DaphneServer, path: str) -> list[str]:
    """How the streams of `path` ended so far, from the server's access log."""
    records = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]
    return [r["end"] for r in records if r["logger"] == "access" and r.get("path") == path and r.get("end")]


def in_db_thread(action: Callable[[], object]) -> None:
    """Run an ORM write from the browser's thread, whose running event loop Django refuses."""

    def run() -> None:
        try:
            action()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(run).result(timeout=30)


def guarded(topic: str, **guard: Any) -> tuple[str, str]:
    """A route on `topic` behind a fresh JWT guard that needs the role `read`: (path, guard name)."""
    name = unique("jwt")
    do_put_guard(**guard_fields(name, **guard))
    path = "/" + unique("js")
    do_put_route(name=path[1:], path=path, topic=topic, guarded={name: ["read"]})
    return path, name


def watch_requests(page: Page) -> list[Request]:
    """The requests the page makes from now on, as the browser reports them."""
    made: list[Request] = []

    def record(request: Request) -> None:  # Playwright cannot take a bound builtin such as list.append
        made.append(request)

    page.on("request", record)
    return made


def stream_requests(requests: list[Request], path: str) -> list[Request]:
    return [r for r in requests if r.method == "GET" and r.url.split("?", 1)[0].endswith(path)]


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------


def test_a_guarded_stream_sends_its_token_in_a_header_and_resumes_after_a_server_close(
    server: DaphneServer, proxy: RecordingProxy, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=2)
    path, guard = guarded(topic)
    run = unique("run")
    sent: list[dict[str, Any]] = []

    def send(n: int) -> None:
        message = {"run": run, "n": n, "partition": n % 2}
        produce(topic, json.dumps(message).encode(), partition=message["partition"])
        sent.append(message)

    asked: list[str] = []

    def fresh(reason: str) -> str:
        asked.append(reason)
        return token("alice", expires_in=600)

    def scenario(page: Page) -> tuple[list[dict[str, Any]], list[str]]:
        page.expose_function("freshToken", fresh)
        browser_requests = watch_requests(page)
        page.goto(proxy.url + CLIENT)
        transport = page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": path, "options": {}, "tokenFromTest": True})
        assert transport == "fetch"
        page.wait_for_function(seen("open"), timeout=10_000)
        for n in range(3):
            send(n)
        page.wait_for_function(seen("message", 3), timeout=10_000)

        # The route changes: the server closes the stream (docs/contract.md §1), the client resumes.
        in_db_thread(
            lambda: do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]}, caught_up=True)
        )
        page.wait_for_function(seen("reconnecting"), timeout=10_000)
        for n in range(3, 6):
            send(n)
        page.wait_for_function(seen("message", 6), timeout=20_000)
        # A replayed duplicate would come before anything new of its partition: a sentinel on each bounds the wait.
        for n in range(6, 8):
            send(n)
        page.wait_for_function(seen("message", 8), timeout=10_000)
        page.evaluate("window.clients[0].close()")
        kinds = [r.resource_type for r in stream_requests(browser_requests, path)]
        return reports(page), kinds

    events, resource_types = in_browser(scenario)
    story = json.dumps(events, indent=1)
    messages = [json.loads(e["data"]) for e in events if e["type"] == "message"]
    assert sorted(messages, key=lambda m: m["n"]) == sent, story  # every message, each once
    for partition in (0, 1):
        assert [m["n"] for m in messages if m["partition"] == partition] == [n for n in range(8) if n % 2 == partition]
    assert [e["type"] for e in events if e["type"] in {"open", "reconnecting", "caught-up"}] == [
        "open", "reconnecting", "open", "caught-up",
    ], story  # fmt: skip
    assert asked == ["connect", "connect"]  # a token for each request
    assert resource_types == ["fetch", "fetch"]

    streams = [r for r in proxy.requests(path) if r.method == "GET"]
    for request in streams:
        assert "access_token" not in request.target, request  # the server never saw the token in the URL
        assert request.target == path
        assert request.headers["authorization"].startswith("Bearer ey"), request
    # A fresh stream, then one resuming from the last event shown before the close.
    last_before_close = [e for e in events if e["type"] == "message"][2]["id"]
    resumed_from = sorted(str(r.headers.get("last-event-id")) for r in streams)
    assert resumed_from == sorted(["None", last_before_close]), streams
    wait_until(lambda: stream_ends(server, path) == ["route_changed", "client_gone"])


def test_a_challenge_is_answered_with_a_token_from_the_callback_and_the_stream_outlives_the_first(
    server: DaphneServer, proxy: RecordingProxy, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    path, _ = guarded(topic, challenge_s=4)
    tokens: list[str] = []
    asked: list[str] = []
    expiries: list[int] = []

    def fresh(reason: str) -> str:
        """The first token lives 5 s (challenged at once, 4 s before it expires); the renewal, ten minutes."""
        asked.append(reason)
        expiries.append(int(time.time()) + (5 if not tokens else 600))
        tokens.append(token("alice", exp=expiries[-1]))
        return tokens[-1]

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.expose_function("freshToken", fresh)
        page.goto(proxy.url + CLIENT)
        page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": path, "options": {}, "tokenFromTest": True})
        page.wait_for_function(seen("renewal"), timeout=10_000)  # challenged 4 s before the first token's expiry
        page.wait_for_timeout(max(0.0, expiries[0] + 1 - time.time()) * 1000)  # past that expiry
        produce(topic, b"after the first token expired")
        page.wait_for_function(seen("message"), timeout=10_000)
        page.evaluate("window.clients[0].close()")
        return reports(page)

    events = in_browser(scenario)
    story = json.dumps(events, indent=1)
    assert [e["type"] for e in events] == ["open", "challenge", "renewal", "message"], story  # never reconnected
    challenge, renewal, message = events[1:]
    assert json.loads(challenge["data"]) == {
        "method": "POST", "headers": {"content-type": "application/x-challenge-response"},
    }  # fmt: skip
    assert renewal["ok"] is True, story
    assert message["data"] == "after the first token expired"
    assert asked == ["connect", "challenge"]

    sent = sorted(proxy.requests(path), key=lambda r: r.method)  # connections are kept apart: order by method
    assert [(r.method, r.headers.get("authorization")) for r in sent] == [
        ("GET", f"Bearer {tokens[0]}"), ("POST", f"Bearer {tokens[1]}"),
    ]  # fmt: skip
    assert sent[1].headers["content-type"] == "application/x-challenge-response"
    wait_until(lambda: stream_ends(server, path) == ["client_gone"])  # not token_expired


def test_a_refused_token_stops_the_client_with_the_problem(
    server: DaphneServer, proxy: RecordingProxy, new_topic: Callable[..., str]
) -> None:
    path, _ = guarded(new_topic())
    signature_broken = token()[:-4] + "AAAA"
    refused = {
        "expired": token(expires_in=-5),
        "signature": signature_broken,
        "without the role": token(scope="other"),
    }
    problems = {
        name: httpx.get(server.url + path, headers={"authorization": f"Bearer {t}"}, timeout=5)
        for name, t in refused.items()
    }

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.goto(proxy.url + CLIENT)
        for value in refused.values():
            options = {"token": value}
            page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": path, "options": options, "tokenFromTest": False})
        page.wait_for_function(seen("error", len(refused)), timeout=10_000)
        return reports(page)

    events = in_browser(scenario)
    assert [e["type"] for e in events] == ["error"] * len(refused), events
    for client, (name, answer) in enumerate(problems.items()):
        problem = answer.json()
        reported = next(e for e in events if e["client"] == client)
        assert reported == {
            "client": client, "type": "error", "readyState": 2, "retryable": False, "status": answer.status_code,
            "title": problem["title"], "detail": problem["detail"], "problemType": problem["type"],
        }, name  # fmt: skip
    assert {name: answer.status_code for name, answer in problems.items()} == {
        "expired": 401, "signature": 401, "without the role": 403,
    }  # fmt: skip
    # One request each: a refusal is final.
    sent = sorted(r.headers["authorization"] for r in proxy.requests(path))
    assert sent == sorted(f"Bearer {t}" for t in refused.values())


def test_an_open_route_reads_through_event_source_and_close_ends_the_stream(
    server: DaphneServer, proxy: RecordingProxy, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    produce(topic, b"a")
    path, missing = "/" + unique("open"), "/" + unique("no-route")
    do_put_route(name=path[1:], path=path, topic=topic)
    past_the_end = encode_progress({0: 999})  # the server resets it to the earliest offset (docs/contract.md §7)

    def scenario(page: Page) -> tuple[str, str, list[dict[str, Any]], list[str]]:
        browser_requests = watch_requests(page)
        served = page.goto(proxy.url + CLIENT)
        assert served is not None
        assert served.status == 200
        options = {"lastEventId": past_the_end}
        transport = page.evaluate(
            OPEN_CLIENT, {"client": CLIENT, "path": path, "options": options, "tokenFromTest": False}
        )
        page.wait_for_function(seen("message"), timeout=10_000)
        produce(topic, None, key=b"gone")  # a tombstone
        page.wait_for_function(seen("delete"), timeout=10_000)
        page.evaluate("window.clients[0].close()")
        page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": missing, "options": {}, "tokenFromTest": False})
        page.wait_for_function(seen("error"), timeout=10_000)
        kinds = [r.resource_type for r in stream_requests(browser_requests, path)]
        return transport, served.headers["content-type"], reports(page), kinds

    transport, content_type, events, resource_types = in_browser(scenario)
    story = json.dumps(events, indent=1)
    assert transport == "eventsource"
    assert resource_types == ["eventsource"]
    assert content_type.startswith("text/javascript")
    first = [
        (e["type"], json.loads(e["data"]) if e["type"] == "reset" else e["data"]) for e in events if e["client"] == 0
    ]
    reset = {"partitions": [{"partition": 0, "requested": 999, "earliest": 0}]}
    assert first == [("open", None), ("reset", reset), ("message", "a"),
                     ("delete", base64.urlsafe_b64encode(b"gone").decode())], story  # fmt: skip
    # A new EventSource cannot send Last-Event-ID: the id went in the contract's query parameter.
    [request] = proxy.requests(path)
    assert request.target == f"{path}?lastEventId={quote(past_the_end, safe='')}"
    wait_until(lambda: stream_ends(server, path) == ["client_gone"])  # close() ended the request

    # EventSource does not say why it stopped; the client asks, and reports the problem.
    answer = httpx.get(server.url + missing, timeout=5)
    [error] = [e for e in events if e["client"] == 1]
    assert error == {
        "client": 1, "type": "error", "readyState": 2, "retryable": False, "status": 404,
        "title": answer.json()["title"], "detail": answer.json()["detail"], "problemType": answer.json()["type"],
    }  # fmt: skip


def test_a_dropped_connection_is_retried_after_growing_jittered_delays_then_resumes(
    server: DaphneServer, proxy: RecordingProxy, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    endpoint = unique("fast-retry")
    do_put_endpoint(name=endpoint, retry_ms=100)  # the stream's `retry:100` sets where the delays start
    path = "/" + unique("drop")
    do_put_route(name=path[1:], path=path, topic=topic, endpoint=endpoint)
    produce(topic, b"before")
    attempts = 5

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.goto(proxy.url + CLIENT)
        options = {"transport": "fetch", "maxRetryMs": 400}  # fetch without a token, as a page may choose
        page.evaluate(OPEN_CLIENT, {"client": CLIENT, "path": path, "options": options, "tokenFromTest": False})
        page.wait_for_function(seen("message"), timeout=10_000)
        proxy.cut()  # the line drops and every new connection is reset: each attempt fails
        try:
            page.wait_for_function(seen("reconnecting", attempts), timeout=20_000)
            produce(topic, b"while cut")
        finally:
            proxy.restore()
        page.wait_for_function(seen("message", 2), timeout=20_000)
        page.evaluate("window.clients[0].close()")
        return reports(page)

    events = in_browser(scenario)
    story = json.dumps(events, indent=1)
    assert [e["data"] for e in events if e["type"] == "message"] == ["before", "while cut"], story
    retries = [e for e in events if e["type"] == "reconnecting"]
    for attempt, retry in enumerate(retries[:attempts], start=1):
        ceiling = min(400, 100 * 2 ** (attempt - 1))  # doubled per failed attempt, capped by maxRetryMs
        assert retry["attempt"] == attempt, story
        assert ceiling / 2 <= retry["delayMs"] <= ceiling, story  # jittered within the upper half
        assert (retry["error"]["status"], retry["error"]["retryable"]) == (0, True), story  # no answer at all
    assert [e["type"] for e in events].count("open") == 2, story  # then one stream again, resumed
    before = next(e for e in events if e["type"] == "message")
    resumed = [r for r in proxy.requests(path) if r.headers.get("last-event-id")]  # cut attempts never got through
    assert [r.headers["last-event-id"] for r in resumed] == [before["id"]], story


@pytest.mark.parametrize("case", [("identity", "fetch"), ("jti", "fetch"), ("identity", "eventsource")], ids="-".join)
def test_a_revoked_token_stops_the_client_for_good_and_a_new_client_is_refused_at_once(
    server: DaphneServer,
    proxy: RecordingProxy,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    case: tuple[str, str],
) -> None:
    revoke, transport = case  # what is revoked; how the client reads
    topic = new_topic()
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard))
    endpoint = unique("fast-retry")
    do_put_endpoint(name=endpoint, retry_ms=100)  # a client that wrongly reconnected would do so within 100 ms
    path = "/" + unique("revoked")
    do_put_route(name=path[1:], path=path, topic=topic, endpoint=endpoint, guarded={guard: ["read"]})
    who, jti = unique("user"), unique("jti")
    bearer = token(who, jti=jti)
    # With no token option the client uses EventSource: the token then travels in the contract's query parameter.
    url, options = (path, {"token": bearer}) if transport == "fetch" else (f"{path}?access_token={bearer}", {})
    operator = User.objects.create_superuser(unique("root"), "root@example.com", "a-long-test-password")
    api_key = Token.objects.create(user=operator).key
    until = (timezone.now() + timedelta(hours=1)).isoformat()
    revocation = {
        "guard": guard,
        "until": until,
        "reason": "a stolen laptop",
        revoke: who if revoke == "identity" else jti,
    }

    def scenario(page: Page) -> tuple[list[dict[str, Any]], int]:
        page.goto(proxy.url + CLIENT)
        opened = {"client": CLIENT, "path": url, "options": options, "tokenFromTest": False}
        assert page.evaluate(OPEN_CLIENT, opened) == transport
        page.wait_for_function(seen("open"), timeout=10_000)
        produce(topic, b"before")
        page.wait_for_function(seen("message"), timeout=10_000)
        made = httpx.post(
            server.url + "/api/v1/revocations/",
            json=revocation,
            headers={"authorization": f"Token {api_key}"},
            timeout=10,
        )
        assert made.status_code == 201, made.text
        page.wait_for_function(seen("error"), timeout=5_000)  # the contract's bound (docs/contract.md §6)
        page.wait_for_timeout(1_000)  # ten times the retry delay: a reconnection would have been made by now
        before_fresh = len(proxy.requests(path))
        page.evaluate(OPEN_CLIENT, opened)
        page.wait_for_function(seen("error", 2), timeout=10_000)
        return reports(page), before_fresh

    events, before_fresh = in_browser(scenario)
    story = json.dumps(events, indent=1)
    refused = httpx.get(server.url + path, headers={"authorization": f"Bearer {bearer}"}, timeout=5)
    assert refused.status_code == 401
    problem = refused.json()
    assert (problem["type"], problem["title"]) == ("urn:sse-kafka-platform:problem:token-revoked", "Token revoked")
    expected = {
        "type": "error", "readyState": 2, "retryable": False, "status": 401,
        "title": problem["title"], "detail": problem["detail"], "problemType": problem["type"],
    }  # fmt: skip

    first = [e for e in events if e["client"] == 0]
    assert [e["type"] for e in first] == ["open", "message", "revoked", "error"], story
    assert json.loads(first[2]["data"]) == {
        "type": problem["type"], "title": problem["title"], "status": 401, "detail": problem["detail"],
    }, story  # fmt: skip
    assert first[3] == {"client": 0, **expected}, story  # the event's problem, not retried
    # The fresh client with the same token: refused on its first request, with the same problem.
    assert [e for e in events if e["client"] == 1] == [{"client": 1, **expected}], story

    sent = [r for r in proxy.requests(path) if r.method == "GET"]
    assert before_fresh == 1, sent  # nothing after the revoked stream: no reconnection
    # The fresh client's one request; EventSource does not say why it was refused, so the client asks once more.
    assert len(sent) == (2 if transport == "fetch" else 3), sent
    wait_until(lambda: stream_ends(server, path)[:1] == ["revoked"])
