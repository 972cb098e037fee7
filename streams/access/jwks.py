"""Reading a guard's JWKS URL (docs/contract.md §2): https only, the whole fetch bounded in time and in size.

An identity provider's endpoint is a server we do not run. urllib's timeout bounds each socket operation, not
the fetch, so a server trickling a byte a second would hold a thread for ever; and a body is read to its end,
however large. Here a timer shuts the socket down at the deadline (connect, TLS, headers and body together),
and the body is read up to `SSE_JWKS_MAX_BYTES`. The keys are built with PyJWT's `PyJWKSet`.

Each guard's client fetches on a thread of its own: a provider that hangs holds up the guards that use it, for
up to the timeout, and no other guard's requests (one pool shared by every guard let two hung fetches stall
them all).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from django.conf import settings
from jwt import PyJWK, PyJWKSet
from jwt.exceptions import PyJWKSetError, PyJWTError

log = logging.getLogger(__name__)

LIFESPAN_S = 300  # a key set is refetched after this long, so a key the provider withdraws stops verifying
REFETCH_S = 5  # an unknown kid refetches at most this often: random kids must not hammer the provider


class JwksError(Exception):
    """The JWKS document cannot be read, or holds no usable key; the message says why."""


def fetch(url: str, *, timeout_s: float, max_bytes: int, allow_http: bool = False) -> bytes:
    """The body of `url`, read within `timeout_s` in all and at most `max_bytes` long, or JwksError."""
    parts = urlsplit(url)
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        raise JwksError(f"{url}: only https is allowed")
    connection = _connection(url, timeout_s)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        if connection.sock is not None:
            with contextlib.suppress(OSError):  # already closed
                connection.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked read

    timer = threading.Timer(timeout_s, cut)
    timer.daemon = True
    timer.start()
    try:
        connection.connect()
        if expired.is_set():  # the deadline passed while connecting, before there was a socket to cut
            raise TimeoutError
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", target, headers={"accept": "application/jwk-set+json, application/json"})
        response = connection.getresponse()
        if response.status != 200:  # noqa: PLR2004  (redirects are not followed: each hop would be unchecked)
            raise JwksError(f"{url}: HTTP {response.status}")
        body = _body(url, response, max_bytes)
        if expired.is_set():  # the cut socket reads as the end of the body
            raise TimeoutError
        return bytes(body)
    except (OSError, http.client.HTTPException, UnicodeError) as exc:  # UnicodeError: a host IDNA refuses
        if expired.is_set():
            raise JwksError(f"{url}: not read within {timeout_s:g} s") from None
        raise JwksError(f"{url}: {exc}") from None
    finally:
        timer.cancel()
        connection.close()


def _connection(url: str, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port that is no number
        raise JwksError(f"{url}: {exc}") from None
    if not host:
        raise JwksError(f"{url}: no host")
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=ssl.create_default_context())
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def _body(url: str, response: http.client.HTTPResponse, max_bytes: int) -> bytearray:
    """The response's body, refused as soon as it is known to be longer than `max_bytes`."""
    length = response.getheader("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise JwksError(f"{url}: the document is {length} bytes, more than the {max_bytes} bytes allowed")
    body = bytearray()
    while chunk := response.read1(65536):
        body += chunk
        if len(body) > max_bytes:
            raise JwksError(f"{url}: the document is more than the {max_bytes} bytes allowed")
    return body


def signing_keys(body: bytes) -> dict[str, PyJWK]:
    """The keys of a JWKS document that may verify signatures (`use` sig or absent, with a kid), by kid."""
    try:
        document = json.loads(body)
        key_set = PyJWKSet.from_dict(document if isinstance(document, dict) else {})
    except (ValueError, PyJWKSetError, PyJWTError) as exc:
        raise JwksError(f"not a JWKS: {exc}") from None
    found = {key.key_id: key for key in key_set.keys if key.public_key_use in {"sig", None} and key.key_id}
    if not found:
        raise JwksError("the JWKS holds no signing key with a kid")
    return found


class JwksClient:
    """One JWKS URL's keys: fetched when first needed, refetched after `LIFESPAN_S` or for an unknown kid (at
    most every `REFETCH_S`). `key` runs the blocking lookup on the client's own thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.keys: dict[str, PyJWK] = {}
        self.error: str | None = None  # why the last fetch failed, until the next one
        self.fetched_at: float | None = None  # time.monotonic() of the last fetch, successful or not
        self.lock = threading.Lock()  # one fetch at a time; the others wait for its keys
        # One thread: fetches are one at a time anyway (the lock). Lookups queue behind a hung fetch here, and a
        # caller that stops waiting takes its queued lookup back (asyncio cancels the pending future). The thread
        # ends when the client is dropped (the executor is collected).
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jwks")

    async def key(self, kid: str) -> PyJWK | None:
        """`signing_key`, run on this client's thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.signing_key, kid)

    def signing_key(self, kid: str) -> PyJWK | None:
        """The key for `kid`, or None if the provider has none; JwksError if the keys cannot be read."""
        with self.lock:
            now = time.monotonic()
            age = None if self.fetched_at is None else now - self.fetched_at
            if age is None or age >= LIFESPAN_S or (age >= REFETCH_S and (self.error or kid not in self.keys)):
                self.fetched_at = now
                try:
                    self.keys, self.error = signing_keys(self.fetch()), None
                except JwksError as exc:
                    self.keys, self.error = {}, str(exc)
            if self.error is not None:
                raise JwksError(self.error)
            return self.keys.get(kid)

    def fetch(self) -> bytes:
        try:
            return fetch(
                self.url,
                timeout_s=settings.SSE_JWKS_TIMEOUT_S,
                max_bytes=settings.SSE_JWKS_MAX_BYTES,
                allow_http=settings.SSE_JWKS_ALLOW_HTTP,
            )
        except JwksError as exc:
            log.warning("JWKS refused: %s", exc)
            raise
