"""A Confluent-compatible schema registry client for the decoders: the one module of the codecs that does I/O.

It lives here, below Kafka, because the fetch processes decode records and import nothing above the codecs.
It is synchronous (it runs in the fetch process's thread, once per schema, not per record) and asks only two
questions of Confluent's REST API, which Karapace and Apicurio (under `/apis/ccompat/v7`) serve too:
`GET /schemas/ids/{id}` and `GET /subjects/{subject}/versions/{version}`.

Answers are kept for `max_age_s` (Zilla's `max-age`), then asked again. A schema found is kept beyond that while
the registry cannot be reached: an outage changes nothing for schemas seen before it. A schema not found is kept
for at most `NOT_FOUND_AGE_S`, so records naming an unknown id do not ask once each. After a failed request the
client waits (half a second, doubling up to `MAX_QUIET_S`) before it asks again, and answers from its cache or with
`registry-unavailable` meanwhile: it never retries in a loop.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from streams.codecs.schemas.errors import DecodeError, Reason
from streams.codecs.schemas.spec import SchemaFormat
from streams.codecs.schemas.timing import schema_work

TIMEOUT_S = 2.0
NOT_FOUND_AGE_S = 5.0
FIRST_QUIET_S = 0.5
MAX_QUIET_S = 30.0
MAX_BODY = 4 * 1024 * 1024
ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
# Confluent's error codes for a subject, a version and a schema id that do not exist, and for a version that is
# not one (version 0): the registry answered, and the schema is not there.
NOT_FOUND_CODES = frozenset({40401, 40402, 40403, 42202})
_FORMATS: dict[str, SchemaFormat] = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json"}


@dataclass(frozen=True)
class Reference:
    """A schema another one imports: its `name` in the importing schema (a `.proto` file name, an Avro type)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema as a catalog gives it. `id` is None for inline schemas, which have none."""

    format: SchemaFormat
    text: str
    id: int | None = None
    subject: str | None = None
    version: int | None = None
    references: tuple[Reference, ...] = ()


@dataclass
class _Entry:
    schema: Schema | None  # None: the registry said there is no such schema
    at: float


class _Unavailable(Exception):
    pass


class _NotFound(Exception):
    pass


class RegistryClient:
    """One registry's answers, cached. Thread-safe; one request at a time."""

    def __init__(
        self,
        url: str,
        *,
        auth: str | None = None,
        max_age_s: float = 300,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self._auth = auth
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, _Entry] = {}
        self._failures = 0
        self._quiet_until = 0.0
        self.last_failure: str | None = None  # why the last request failed; None once one succeeds

    def __repr__(self) -> str:
        return f"RegistryClient({self.url!r})"

    def by_id(self, schema_id: int) -> Schema:
        """The schema registered under `schema_id` (the id a framed record carries)."""
        return self._answer(f"/schemas/ids/{int(schema_id)}", schema_id=schema_id)

    def by_subject(self, subject: str, version: Literal["latest"] | int) -> Schema:
        """Version `version` of `subject`, or its latest."""
        quoted = urllib.parse.quote(subject, safe="")
        return self._answer(f"/subjects/{quoted}/versions/{version}")

    def _answer(self, path: str, schema_id: int | None = None) -> Schema:
        with self._lock:
            now = self._clock()
            entry = self._cache.get(path)
            if entry is not None:
                age = now - entry.at
                if entry.schema is not None and age < self._max_age_s:
                    return entry.schema
                if entry.schema is None and age < min(NOT_FOUND_AGE_S, self._max_age_s):
                    raise DecodeError(Reason.UNKNOWN_SCHEMA, path)
            stale = entry.schema if entry is not None else None
            if now < self._quiet_until:
                if stale is not None:
                    return stale
                raise DecodeError(Reason.REGISTRY_UNAVAILABLE, self.last_failure or "")
            try:
                with schema_work():
                    schema = _schema(self._get(path), schema_id)
            except _NotFound:
                self._succeeded()
                self._cache[path] = _Entry(None, now)
                raise DecodeError(Reason.UNKNOWN_SCHEMA, path) from None
            except _Unavailable as exc:
                self._failed(f"{self.url}{path}: {exc}", now)
                if stale is not None:
                    return stale
                raise DecodeError(Reason.REGISTRY_UNAVAILABLE, self.last_failure or "") from None
            self._succeeded()
            self._cache[path] = _Entry(schema, now)
            return schema

    def _succeeded(self) -> None:
        self._failures, self._quiet_until, self.last_failure = 0, 0.0, None

    def _failed(self, why: str, now: float) -> None:
        self._failures += 1
        self._quiet_until = now + min(MAX_QUIET_S, FIRST_QUIET_S * 2 ** (self._failures - 1))
        self.last_failure = why

    def _get(self, path: str) -> Any:
        headers = {"Accept": ACCEPT}
        if self._auth:
            headers["Authorization"] = self._auth
        request = urllib.request.Request(self.url + path, headers=headers)  # noqa: S310  (an operator's http(s) URL)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:  # noqa: S310
                body = response.read(MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            if exc.code in (http.HTTPStatus.NOT_FOUND, http.HTTPStatus.UNPROCESSABLE_ENTITY):
                code = _error_code(exc)
                if code in NOT_FOUND_CODES:
                    raise _NotFound from None
            raise _Unavailable(f"HTTP {exc.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            raise _Unavailable(f"{type(exc).__name__}: {exc}") from None
        if len(body) > MAX_BODY:
            raise _Unavailable("an answer over 4 MiB")
        try:
            return json.loads(body)
        except ValueError:
            raise _Unavailable("an answer that is not JSON") from None


def _error_code(error: urllib.error.HTTPError) -> int | None:
    try:
        body = json.loads(error.read(64 * 1024))
    except (ValueError, OSError, http.client.HTTPException):
        return None
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def _schema(body: Any, schema_id: int | None) -> Schema:
    """The schema of an answer; anything that is not the API's shape is the registry being unavailable."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise _Unavailable("an answer without a schema")
    kind = body.get("schemaType", "AVRO")
    if kind not in _FORMATS:
        raise _Unavailable(f"a schema of unknown type {kind!r}")
    references = body.get("references") or []
    if not isinstance(references, list) or not all(_is_reference(ref) for ref in references):
        raise _Unavailable("malformed references")
    found_id = body.get("id", schema_id)
    version = body.get("version")
    subject = body.get("subject")
    return Schema(
        format=_FORMATS[kind],
        text=body["schema"],
        id=found_id if isinstance(found_id, int) else schema_id,
        subject=subject if isinstance(subject, str) else None,
        version=version if isinstance(version, int) else None,
        references=tuple(Reference(ref["name"], ref["subject"], ref["version"]) for ref in references),
    )


def _is_reference(ref: Any) -> bool:
    return (
        isinstance(ref, dict)
        and isinstance(ref.get("name"), str)
        and isinstance(ref.get("subject"), str)
        and isinstance(ref.get("version"), int)
    )
