"""The JavaScript client's event stream parser (streams/static/streams/sse-parser.js), run in Debian's Chromium.

Each input is fed whole and in chunks of 1, 2 and 3 bytes, so that every CRLF, every UTF-8 sequence and every
field is also split across chunks; the events must come out the same, as the WHATWG rules say they do.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser.test_demo import in_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PARSER = "/static/streams/sse-parser.js"
FEED = """async ({ parser, cases }) => {
  const { SseParser } = await import(parser);
  return cases.map(({ bytes, chunk, lastEventId }) => {
    const events = [], retries = [], comments = [];
    const p = new SseParser({
      lastEventId,
      onEvent: (event) => events.push([event.type, event.data, event.lastEventId]),
      onRetry: (ms) => retries.push(ms),
      onComment: (text) => comments.push(text),
    });
    const input = new Uint8Array(bytes);
    for (let at = 0; at < input.length; at += chunk) p.push(input.subarray(at, at + chunk));
    p.end();
    return { events, retries, comments, lastEventId: p.lastEventId };
  });
}"""

M = "message"
# (name, input, expected events as (type, data, lastEventId), expected outcome besides events)
CASES: list[tuple[str, bytes, list[tuple[str, str, str]], dict[str, Any]]] = [
    ("crlf, cr and lf end lines", b"data:a\r\ndata:b\rdata:c\n\r\n", [(M, "a\nb\nc", "")], {}),
    ("cr cr is a line then a blank line", b"data:x\r\rdata:y\n\n", [(M, "x", ""), (M, "y", "")], {}),
    ("crlf blank lines", b"data:x\r\n\r\ndata:y\r\n\r\n", [(M, "x", ""), (M, "y", "")], {}),
    ("one leading space is dropped", b"data: one\ndata:  two\ndata:three\n\n", [(M, "one\n two\nthree", "")], {}),
    ("a colon in the value stays", b"data:a: b\n\n", [(M, "a: b", "")], {}),
    ("a field without colon has an empty value", b"data\ndata\n\n", [(M, "\n", "")], {}),
    ("an empty data line is an event", b"data:\n\n", [(M, "", "")], {}),
    ("comments dispatch nothing", b": keep-alive\n:\n\ndata:after\n\n", [(M, "after", "")],
     {"comments": [" keep-alive", ""]}),
    ("ids persist, an id line without colon clears",
     b"id:1\ndata:a\n\ndata:b\n\nid\ndata:c\n\n", [(M, "a", "1"), (M, "b", "1"), (M, "c", "")], {"lastEventId": ""}),
    ("an id holding NUL is ignored", b"id:2\ndata:a\n\nid:x\x00y\ndata:b\n\n", [(M, "a", "2"), (M, "b", "2")], {}),
    ("an id-only block moves the id without an event", b"id:7\n\n", [], {"lastEventId": "7"}),
    ("an unfinished event and its id are dropped at the end",
     b"id:1\ndata:a\n\nid:2\ndata:b\n", [(M, "a", "1")], {"lastEventId": "1"}),
    ("a last line without its end is dropped", b"data:x\n\ndata:y", [(M, "x", "")], {}),
    ("retry takes digits only", b"retry:1500\nretry:15x\nretry: 2\nretry:\nretry:-1\ndata:r\n\n", [(M, "r", "")],
     {"retries": [1500, 2]}),
    ("the type resets after each event",
     b"event:delete\ndata:k\n\ndata:m\n\nevent:\ndata:n\n\n", [("delete", "k", ""), (M, "m", ""), (M, "n", "")], {}),
    ("field names are case-sensitive, unknown ones ignored", b"Data:x\nfoo:bar\ndata:y\n\n", [(M, "y", "")], {}),
    ("a typed block without data dispatches nothing", b"event:caught-up\n\ndata:z\n\n", [(M, "z", "")], {}),
    ("one leading BOM is dropped", b"\xef\xbb\xbfdata:bom\n\n", [(M, "bom", "")], {}),
    ("a second BOM is part of the field name", b"\xef\xbb\xbf\xef\xbb\xbfdata:x\n\n", [], {}),
    ("utf-8 split anywhere", "data:é€😀\n\n".encode(), [(M, "é€😀", "")], {}),
    ("invalid utf-8 becomes U+FFFD", b"data:\xff\xfe\n\n", [(M, "\ufffd\ufffd", "")], {}),
]  # fmt: skip


def test_the_parser_reads_tricky_streams_as_browsers_do(daphne_url: str) -> None:
    cases = [
        {"bytes": list(data), "chunk": chunk, "lastEventId": ""}
        for _, data, _, _ in CASES
        for chunk in (len(data) or 1, 1, 2, 3)
    ]

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.goto(daphne_url + PARSER)
        result: list[dict[str, Any]] = page.evaluate(FEED, {"parser": PARSER, "cases": cases})
        return result

    results = iter(in_browser(scenario))
    for name, _, events, outcome in CASES:
        expected = {"events": [list(e) for e in events], "retries": [], "comments": [], "lastEventId": "", **outcome}
        if events and "lastEventId" not in outcome:
            expected["lastEventId"] = events[-1][2]
        for chunk in ("whole", 1, 2, 3):
            assert next(results) == expected, f"{name}, chunks of {chunk}"


def test_a_parser_starts_from_the_id_it_resumed_with(daphne_url: str) -> None:
    """As browsers do on a reconnection: a first block without an id keeps the id the request resumed from."""
    stream = b"retry:2000\n\ndata:x\n\n"
    cases = [{"bytes": list(stream), "chunk": 1, "lastEventId": "AQIAAg=="}]

    def scenario(page: Page) -> list[dict[str, Any]]:
        page.goto(daphne_url + PARSER)
        result: list[dict[str, Any]] = page.evaluate(FEED, {"parser": PARSER, "cases": cases})
        return result

    [result] = in_browser(scenario)
    assert result == {"events": [[M, "x", "AQIAAg=="]], "retries": [2000], "comments": [], "lastEventId": "AQIAAg=="}
