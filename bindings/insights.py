"""What a route's admin page tells about its topic: how its records are decoded, and how many were skipped.

How they are decoded the control plane knows itself: the topic model that covers the route's topic, as the data
plane picks it (`bindings.selectors.topic_models_for`). A route's topic may hold `${...}` placeholders: it then
stands for every topic it can render, read as a pattern (`orders-${params.region}` -> `orders-*`), and the model
shown is the most specific one covering all of them (`covers`), as the AsyncAPI export describes the route.

How many records were skipped only the data plane knows, and `bindings` never imports it (import-linter): the
data plane registers its count here when its app is ready (streams/apps.py), and this module asks it. A process
without a data plane has none registered, and the page says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bindings.models.catalogs import covers, topic_glob
from bindings.selectors import ModelSpec, topic_model_specs

DecodeErrors = Callable[[str], Mapping[str, Mapping[str, int]]]
"""A topic pattern (`*` matching any run of characters) -> {topic it covers: {reason: records skipped}}."""

_decode_errors: list[DecodeErrors] = []  # the data plane's, once registered


def register_decode_errors(source: DecodeErrors) -> None:
    """Make `source` the count of skipped records the route page shows (the data plane's app, at `ready()`)."""
    _decode_errors[:] = [source]


@dataclass(frozen=True)
class Skipped:
    topic: str
    reason: str
    records: int


@dataclass(frozen=True)
class TopicInsight:
    """The route page's "Decoding" box. `skipped` is None when no data plane counts in this process."""

    pattern: str  # the route's topic, `${...}` read as `*`
    topic_model: str | None  # the pattern of the topic model that covers it, None if none does
    key: str
    value: str
    skipped: tuple[Skipped, ...] | None

    @property
    def templated(self) -> bool:
        return "*" in self.pattern

    @property
    def skipped_total(self) -> int:
        return sum(row.records for row in self.skipped or ())


def topic_insight(topic: str) -> TopicInsight:
    """What the route page says about the topic (template) `topic`."""
    pattern = topic_glob(topic)
    found = next((spec for spec in topic_model_specs() if covers(spec.topic_pattern, pattern)), None)
    skipped = None
    if _decode_errors:
        counts = _decode_errors[0](pattern)
        skipped = tuple(
            Skipped(topic, reason, records)
            for topic, reasons in sorted(counts.items())
            for reason, records in sorted(reasons.items())
            if records
        )
    return TopicInsight(
        pattern=pattern,
        topic_model=None if found is None else found.topic_pattern,
        key=describe(None if found is None else found.key, f"{pattern}-key"),
        value=describe(None if found is None else found.value, f"{pattern}-value"),
        skipped=skipped,
    )


def describe(model: ModelSpec | None, topic_subject: str) -> str:
    """One side's model in words: "decoded as avro via catalog demo (subject orders-value, version latest)".
    `topic_subject` is the subject `strategy: topic` reads (`<topic>-key` or `<topic>-value`)."""
    if model is None:
        return "passed through as bytes"
    if model.catalog is None:
        encoding = f" ({model.encoding})" if model.model == "string" else ""
        return f"decoded as {model.model}{encoding}"
    if model.schema_id is not None:
        choice = f"schema id {model.schema_id}"
    elif model.subject is not None:
        choice = f"subject {model.subject}, version {model.version}"
    else:
        choice = f"subject {topic_subject}, version {model.version}"
    record = f", message {model.record}" if model.record else ""
    return f"decoded as {model.model} via catalog {model.catalog} ({choice}{record})"
