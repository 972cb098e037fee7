"""Where the jars that `platform/install.sh` fetches with Maven are kept: a cache outside the checkout, shared by
every clone on the machine, with one directory per pom named after the pom's hash (`<name>-<16 hex digits>`), so
a changed pom gets a fresh copy and an unchanged one is never fetched again.

`platform/embedded_kafka.py` (Apache Kafka), `platform/embedded_registry.py` (Apicurio Registry) and
`analytics/jobs/jars.py` (Spark's Kafka source) each name their directory through `pom_dir`, and install.sh asks
them where to copy.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/sse-kafka-platform`, or `~/.cache/sse-kafka-platform` when that is unset or empty."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sse-kafka-platform"


def pom_dir(name: str, pom: Path) -> Path:
    """The cache directory of the jars `pom` names as it is now: `name` and the start of the pom's sha256."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    return cache_root() / f"{name}-{digest}"
