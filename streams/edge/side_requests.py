"""The requests on a stream path that open no stream: a CORS preflight, a challenge response, another method
(docs/contract.md §2, §6)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from django.conf import settings

from streams.access.guards import accepted_by_any, credentials
from streams.access.renewal import CHALLENGE_CONTENT_TYPE
from streams.codecs.asgi import Receive, Scope, Send, header
from streams.edge.http import STREAM_METHODS, cors_headers, problem
from streams.routes.table import RouteTable
from streams.server.addresses import client_key
from streams.server.bodies import CHALLENGE_BODY_BYTES

if TYPE_CHECKING:
    from streams.edge.runtime import Runtime

log = logging.getLogger(__name__)

# The server refuses a larger body before the app sees it (streams/server/bodies.py); checked here too, for
# servers other than ours.
MAX_CHALLENGE_BODY_BYTES = CHALLENGE_BODY_BYTES


async def side_request(scope: Scope, receive: Receive, send: Send, path: str, runtime: Runtime) -> bool:
    """Answer a request that opens no stream; False for a GET or HEAD, which may."""
    method = scope["method"]
    if method == "OPTIONS":
        await preflight(scope, send, path, runtime.routes)
    elif method == "POST" and (header(scope, b"content-type") or b"").split(b";")[0].strip().lower() == (
        CHALLENGE_CONTENT_TYPE
    ):
        await challenge_response(scope, receive, send, path, runtime)
    elif method not in {"GET", "HEAD"}:
        runtime.refused("", 405, "method")
        detail = f"{method} is not allowed on a stream; use GET."
        await problem(send, 405, "Method not allowed", detail, headers=((b"allow", STREAM_METHODS.encode()),))
    else:
        return False
    return True


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
    """A client's answer to a `challenge` event: 204, and its token renews matching streams everywhere; 413 for a
    body (it has none by contract) over MAX_CHALLENGE_BODY_BYTES, 429 past the rate of the token's guard and
    identity (or of the token, without an identity; of the client address, without a valid token)."""
    routes = runtime.routes
    try:
        matched = await routes.match(path)
    except Exception:
        log.warning("challenge response: routes cannot be read", exc_info=True)
        matched = None
    cors = () if matched is None else cors_headers(matched.route.endpoint, header(scope, b"origin"))
    route = "" if matched is None else matched.route.name
    received = 0
    while True:  # the body is empty by contract; read it to the end whatever it is, up to a bound
        message = await receive()
        received += len(message.get("body", b""))
        if received > MAX_CHALLENGE_BODY_BYTES:
            detail = f"A challenge response has no body; this one is over {MAX_CHALLENGE_BODY_BYTES} bytes."
            runtime.refused(route, 413, "body_too_large")
            await problem(send, 413, "Content too large", detail, headers=cors)
            return
        if message["type"] == "http.disconnect" or not message.get("more_body"):
            break
    token = credentials(scope)
    # Only a token one of our guards accepts goes to every process: garbage stays here.
    accepted = None if token is None else await accepted_by_any(routes.guards(), token)
    client = client_key(str((scope.get("client") or ("",))[0]))
    # Per guard: two identity providers may both name a user "alice", who are not one user.
    key = f"client:{client}" if accepted is None else f"guard:{accepted[0]}\0{accepted[1].holder}"
    wait = runtime.challenges.take(key)
    if wait:
        retry = max(1, math.ceil(wait))
        limit = settings.SSE_MAX_CHALLENGE_RESPONSES_PER_MIN
        detail = f"More than {limit} challenge responses in a minute from this identity; retry in {retry} s."
        runtime.refused(route, 429, "challenge_rate")
        await problem(send, 429, "Too many requests", detail, headers=((b"retry-after", b"%d" % retry), *cors))
        return
    await send({"type": "http.response.start", "status": 204, "headers": list(cors)})
    await send({"type": "http.response.body", "body": b""})
    if token is not None and accepted is not None:
        await runtime.renewals.broadcast(token)
