"""How the worker's child processes (the consumer processes, their decoder processes) log: as the worker does
(`LOG_FORMAT`, `LOG_LEVEL`), one line per record on stderr, without importing config/logs.py (its package starts
Celery)."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime


class JsonLines(logging.Formatter):
    """The worker's JSON log lines, as config/logs.py writes them."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": "-",
            "process": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def log_to_stderr() -> None:
    """As the worker logs (`LOG_FORMAT`, `LOG_LEVEL`): one line per record on stderr."""
    handler = logging.StreamHandler()
    if os.environ.get("LOG_FORMAT") == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [-] %(message)s"))
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level if level in logging.getLevelNamesMapping() else "INFO", handlers=[handler])
