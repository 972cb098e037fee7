"""The requests on a stream path that open no stream: a CORS preflight, and a challenge response
(docs/contract.md §2, §6)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from streams.asgi import Receive, Scope, Send, header
from streams.guards import accepted_by_any, credentials
from streams.http import STREAM_METHODS, cors_headers, problem
from streams.routes import RouteTable

if TYPE_CHECKING:
    from streams.runtime import Runtime

log = logging.getLogger(__name__)


async def preflight(scope: Scope, send: Send, path: str, routes: RouteTable) -> None:
    """A CORS preflight: 204 with the route's endpoint's CORS headers, or 404."""
    matched = await routes.match(path)
    if matched is None:
        await problem(send, 404, "No route", f"No route matches {path}.")
        return
    headers = [(b"allow", STREAM_METHODS.encode())]
    cors = cors_headers(matched.route.endpoint, header(scope, b"origin"))
    if cors:
        requested = header(scope, b"access-control-request-headers")
        headers += [*cors, (b"access-control-allow-methods", b"GET, HEAD, OPTIONS, POST")]
        headers += [(b"access-control-max-age", b"600")]
        if requested:
            headers.append((b"access-control-allow-headers", requested))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def challenge_response(scope: Scope, receive: Receive, send: Send, path: str, runtime: Runtime) -> None:
    """A client's answer to a `challenge` event: always 204; its token renews matching streams everywhere."""
    routes = runtime.routes
    try:
        matched = await routes.match(path)
    except Exception:
        log.warning("challenge response: routes cannot be read", exc_info=True)
        matched = None
    cors = () if matched is None else cors_headers(matched.route.endpoint, header(scope, b"origin"))
    while True:  # the body is empty by contract; read it to the end whatever it is
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 204, "headers": list(cors)})
    await send({"type": "http.response.body", "body": b""})
    token = credentials(scope)
    # Only a token one of our guards accepts goes to every process: garbage stays here.
    if token is not None and await accepted_by_any(routes.guards(), token):
        await runtime.sessions.broadcast(token)
