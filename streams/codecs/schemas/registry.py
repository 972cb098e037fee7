"""A Confluent-compatible schema registry client for the decoders: the one module of the codecs that does I/O.

It lives here, below Kafka, because the fetch processes decode records and import nothing above the codecs.
It is synchronous (it runs in the fetch process's thread, once per answer it has not cached, not per record) and
asks three questions of Confluent's REST API, which Karapace and Apicurio (under `/apis/ccompat/v7`) serve too:
`GET /schemas/ids/{id}` (a schema), `GET /schemas/ids/{id}/versions` (the subjects and versions that hold it: what
decides whether a record may use it) and `GET /subjects/{subject}/versions/{version}`. What their answers mean is
streams/codecs/schemas/registry_answers.py.

Every question is one lookup, and lookups are bounded one by one (docs/schemas.md says the same for operators):

- **Cached**: an answer is kept for `max_age_s` (Zilla's `max-age`), then asked again; an answer found is kept
  beyond that while asking again fails, so an outage changes nothing for schemas seen before it. A "not found"
  is kept `NOT_FOUND_AGE_S`. The cache holds at most `Limits.cache_entries` answers and `Limits.cache_bytes`
  (schema text counted), the least recently used going first.
- **Rate-limited**: every request takes a token from a bucket of `Limits.lookups_per_s` a second (that many at
  once at most). Without a token, a lookup with a cached answer gives it, one without is `registry-unavailable`
  for now (its record waits and is tried again), so records naming ever new ids cost the registry and the fetch
  loop a bounded number of requests.
- **Backing off per lookup**: a failed lookup is not asked again for half a second, doubling up to `MAX_QUIET_S`,
  and meanwhile answers from the cache or with `registry-unavailable`; other lookups go on. Only a connection
  that cannot be made (refused, unreachable, timed out before an answer) quiets every lookup of the client, since
  no lookup can succeed then.
- **Given up**: a failure tied to what was asked, not to the registry being down (a 403, an answer over
  `MAX_BODY`, a schema of a type not known, references not of the API's shape), makes the lookup
  `registry-unavailable` (its record waits) until it has failed for `Limits.give_up_s`; from then on it is
  `unknown-schema` (the record is skipped) until the registry gives an answer. A registry that is down or answers
  with anything else (a 5xx, a 401, not JSON) is waited for, never given up on.

Credentials go to the registry and nowhere else: the `Authorization` header is sent to the catalog's URL only,
redirects are never followed (a 3xx is a failed lookup), and the URL's user info, if any, is neither sent nor
shown: messages name the URL as `redacted` writes it.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeVar, cast

from streams.codecs.schemas.errors import DecodeError, Reason
from streams.codecs.schemas.registry_answers import (
    Answer,
    Failure,
    Refused,
    Schema,
    SubjectVersions,
    Unavailable,
    schema_of,
    subject_versions_of,
)
from streams.codecs.schemas.spec import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_ENTRIES,
    DEFAULT_GIVE_UP_S,
    DEFAULT_LOOKUPS_PER_S,
    redacted,
)
from streams.codecs.schemas.timing import schema_work

TIMEOUT_S = 2.0  # each socket operation; the whole answer must come within twice as long
NOT_FOUND_AGE_S = 5.0
FIRST_QUIET_S = 0.5
MAX_QUIET_S = 30.0
MAX_BODY = 4 * 1024 * 1024
ENTRY_OVERHEAD = 256  # bytes an answer costs the cache besides its text
ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
# Confluent's error codes for a subject, a version and a schema id that do not exist, and for a version that is
# not one (version 0): the registry answered, and the schema is not there.
NOT_FOUND_CODES = frozenset({40401, 40402, 40403, 42202})


_A = TypeVar("_A", Schema, SubjectVersions)


@dataclass(frozen=True)
class Limits:
    """What one registry client may hold and ask: the settings `SSE_REGISTRY_*` (config/settings/streams.py)."""

    cache_entries: int = DEFAULT_CACHE_ENTRIES
    cache_bytes: int = DEFAULT_CACHE_BYTES
    lookups_per_s: int = DEFAULT_LOOKUPS_PER_S
    give_up_s: float = DEFAULT_GIVE_UP_S


@dataclass
class _Entry:
    """One lookup: its last answer (None: none yet, or the registry said there is none), and its failures since."""

    answer: Answer | None = None
    at: float = 0.0  # when `answer` came (or the registry said there is none)
    missing: bool = False
    size: int = ENTRY_OVERHEAD
    failures: int = 0
    failing_since: float = 0.0
    quiet_until: float = 0.0
    why: str = ""
    tied: bool = False  # the last failure is the answer to this lookup, not the registry being down


class _Unreachable(Unavailable):
    """No connection could be made: no lookup can succeed."""


class _NotFound(Exception):
    pass


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: following it would send the catalog's Authorization header to another URL."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _without_user_info(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class _Bucket:
    """`rate` tokens a second, `rate` at most at once."""

    def __init__(self, rate: int, now: float) -> None:
        self._rate, self._tokens, self._at = float(rate), float(rate), now

    def take(self, now: float) -> bool:
        self._tokens = min(self._rate, self._tokens + max(0.0, now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class RegistryClient:
    """One registry's answers, cached. Thread-safe; one request at a time."""

    def __init__(
        self,
        url: str,
        *,
        auth: str | None = None,
        max_age_s: float = 300,
        limits: Limits | None = None,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = redacted(url.rstrip("/"))  # what messages show
        self._base = _without_user_info(url.rstrip("/"))  # what is asked
        self._auth = auth
        self._max_age_s = max_age_s
        self.limits = limits or Limits()
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._bucket = _Bucket(self.limits.lookups_per_s, clock())
        self._failures = 0  # connections that could not be made in a row
        self._quiet_until = 0.0  # no lookup asks before this, after such a connection
        self.requests = 0  # requests made: what the rate limit bounds
        self.last_failure: str | None = None  # why the last request failed; None once one succeeds

    def __repr__(self) -> str:
        return f"RegistryClient({self.url!r})"

    @property
    def cached(self) -> tuple[int, int]:
        """The answers and lookups the cache holds, and the bytes they count for."""
        with self._lock:
            return len(self._cache), self._bytes

    def by_id(self, schema_id: int) -> Schema:
        """The schema registered under `schema_id` (the id a framed record carries)."""
        return self._answer(f"/schemas/ids/{int(schema_id)}", lambda body: schema_of(body, schema_id))

    def subjects_of(self, schema_id: int) -> SubjectVersions:
        """The (subject, version)s that hold the schema `schema_id`."""
        return self._answer(f"/schemas/ids/{int(schema_id)}/versions", subject_versions_of)

    def by_subject(self, subject: str, version: Literal["latest"] | int) -> Schema:
        """Version `version` of `subject`, or its latest."""
        quoted = urllib.parse.quote(subject, safe="")
        return self._answer(f"/subjects/{quoted}/versions/{version}", lambda body: schema_of(body, None))

    def _answer(self, path: str, read: Callable[[Any], _A]) -> _A:
        # A path is always read by the same `read`: what its entry holds is of the type it gives.
        return cast("_A", self._lookup(path, read))

    def _lookup(self, path: str, read: Callable[[Any], Answer]) -> Answer:
        with self._lock:
            now = self._clock()
            entry = self._cache.get(path)
            if entry is None:
                entry = self._keep(path, _Entry())
            else:
                self._cache.move_to_end(path)
            if entry.missing and now - entry.at < min(NOT_FOUND_AGE_S, self._max_age_s):
                raise DecodeError(Reason.UNKNOWN_SCHEMA, path)
            if entry.answer is not None and now - entry.at < self._max_age_s:
                return entry.answer
            if now < max(entry.quiet_until, self._quiet_until) or not self._bucket.take(now):
                return self._without_asking(path, entry, now)
            self.requests += 1
            try:
                with schema_work():
                    answer = read(self._get(path))
            except _NotFound:
                self._answered(path, _Entry(missing=True, at=now))
                raise DecodeError(Reason.UNKNOWN_SCHEMA, path) from None
            except Failure as exc:
                self._failed(path, entry, exc, now)
                return self._without_asking(path, entry, now)
            self._answered(path, _Entry(answer, now, size=_size(answer)))
            return answer

    def _without_asking(self, path: str, entry: _Entry, now: float) -> Answer:
        """What a lookup gives while it may not ask: its last answer, else why there is none."""
        if entry.answer is not None:
            return entry.answer
        if entry.tied and now - entry.failing_since >= self.limits.give_up_s:
            raise DecodeError(Reason.UNKNOWN_SCHEMA, f"{path}: {entry.why} (given up)")
        if entry.failures:
            raise DecodeError(Reason.REGISTRY_UNAVAILABLE, f"{self.url}{path}: {entry.why}")
        if now < self._quiet_until:
            raise DecodeError(Reason.REGISTRY_UNAVAILABLE, self.last_failure or "")
        raise DecodeError(Reason.REGISTRY_UNAVAILABLE, f"{self.url}: lookups rate-limited")

    def _keep(self, path: str, entry: _Entry) -> _Entry:
        old = self._cache.pop(path, None)
        if old is not None:
            self._bytes -= old.size
        self._cache[path] = entry
        self._bytes += entry.size
        while len(self._cache) > self.limits.cache_entries or self._bytes > self.limits.cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._bytes -= evicted.size
            if evicted is entry:
                break
        return entry

    def _answered(self, path: str, entry: _Entry) -> None:
        self._failures, self._quiet_until, self.last_failure = 0, 0.0, None
        self._keep(path, entry)

    def _failed(self, path: str, entry: _Entry, failure: Failure, now: float) -> None:
        why = str(failure)
        self.last_failure = f"{self.url}{path}: {why}"
        if not entry.failures:
            entry.failing_since = now
        entry.failures += 1
        entry.quiet_until = now + _quiet(entry.failures)
        entry.why, entry.tied = why, failure.tied
        if isinstance(failure, _Unreachable):
            self._failures += 1
            self._quiet_until = now + _quiet(self._failures)

    def _get(self, path: str) -> Any:
        headers = {"Accept": ACCEPT}
        if self._auth:
            headers["Authorization"] = self._auth
        request = urllib.request.Request(self._base + path, headers=headers)  # noqa: S310  (an operator's http(s) URL)
        deadline = time.monotonic() + 2 * self._timeout_s
        try:
            with _OPENER.open(request, timeout=self._timeout_s) as response:
                body = _read(response, MAX_BODY + 1, deadline)
        except urllib.error.HTTPError as exc:
            _refused_status(exc)
        except urllib.error.URLError as exc:  # before any answer: the connection
            raise _Unreachable(f"{type(exc.reason).__name__}: {exc.reason}") from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from None
        if len(body) > MAX_BODY:
            raise Refused("an answer over 4 MiB")
        try:
            return json.loads(body)
        except ValueError:
            raise Unavailable("an answer that is not JSON") from None


def _quiet(failures: int) -> float:
    return min(MAX_QUIET_S, FIRST_QUIET_S * 2.0 ** (failures - 1))


def _read(response: Any, limit: int, deadline: float) -> bytes:
    """At most `limit` bytes of the answer, all of them before `deadline`: a registry that sends its answer a
    byte at a time holds the fetch loop no longer than one that sends nothing."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long")
        chunk = response.read1(min(64 * 1024, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _refused_status(error: urllib.error.HTTPError) -> NoReturn:
    """Raise what an HTTP error status means for the lookup."""
    code = error.code
    try:
        found = _error_code(error) if code in (http.HTTPStatus.NOT_FOUND, http.HTTPStatus.UNPROCESSABLE_ENTITY) else 0
    finally:
        error.close()
    if found in NOT_FOUND_CODES:
        raise _NotFound from None
    if code == http.HTTPStatus.FORBIDDEN:
        raise Refused("HTTP 403") from None
    if 300 <= code < 400:  # noqa: PLR2004
        raise Unavailable(f"HTTP {code}: a redirect, not followed (the catalog's URL is the registry's own)") from None
    raise Unavailable(f"HTTP {code}") from None


def _error_code(error: urllib.error.HTTPError) -> int | None:
    try:
        body = json.loads(error.read(64 * 1024))
    except (ValueError, OSError, http.client.HTTPException):
        return None
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def _size(answer: Answer) -> int:
    if isinstance(answer, Schema):
        references = sum(len(ref.name) + len(ref.subject) for ref in answer.references)
        return ENTRY_OVERHEAD + len(answer.text) + references
    return ENTRY_OVERHEAD + sum(len(subject) + 16 for subject, _ in answer)
