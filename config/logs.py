"""Logging: one line per record, plain or JSON (`LOG_FORMAT`), each carrying the id of the request it belongs to.

The request id is the client's `x-request-id` when it is a short token of safe characters (a proxy's id then
follows the request here), else a new one; the stream endpoint sets it for every request, Django's included,
and sends it back as `x-request-id`. Records logged outside a request carry `-`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from contextvars import ContextVar
from datetime import UTC, datetime

request_id: ContextVar[str] = ContextVar("request_id", default="-")
_SAFE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
# Attributes an access record may carry, copied into its JSON object.
ACCESS_FIELDS = ("method", "path", "status", "bytes", "duration_ms", "client", "route", "end", "events")
access_log = logging.getLogger("access")


def log_access(**fields: object) -> None:
    """One access line: a response that ended, or a stream that closed. `path` never has its query string."""
    access_log.info("%(method)s %(path)s %(status)s %(bytes)s", fields, extra=fields)


def new_request_id(given: bytes | None) -> str:
    """The client's id if it is safe to log as is, else a new one."""
    if given is not None and _SAFE_ID.fullmatch(given):
        return given.decode("ascii")
    return os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] gave, at a quarter of its cost


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (`%(request_id)s`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time, level, logger, message, request id, access fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
            "process": record.process,
        }
        entry.update({name: getattr(record, name) for name in ACCESS_FIELDS if hasattr(record, name)})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def logging_config(level: str, form: str) -> dict[str, object]:
    """Django's LOGGING: everything to stderr, as `form` ("plain" or "json")."""
    formatters: dict[str, dict[str, object]] = {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {"()": JsonFormatter},
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": formatters,
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": form, "filters": ["request_id"]},
        },
        "root": {"handlers": ["console"], "level": level},
    }
