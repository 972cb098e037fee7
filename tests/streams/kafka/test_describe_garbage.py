"""Describing a topic that does not exist, against the real broker, leaves nothing for the cyclic collector: every
request naming an unknown topic describes it, and each failed describe used to leave its exception, the admin's
future and two frames in a cycle, kept until the collector's review (streams/server/collector.py freezes what a
pass keeps) and enough, at a hundred requests, to fail tests/streams/server/test_cyclic_garbage.py."""

from __future__ import annotations

import asyncio
import gc

import pytest
from confluent_kafka import KafkaException
from django.conf import settings as django_settings

from streams.kafka.client import Metadata, TopicNotFoundError
from tests.conftest import unique

DESCRIBES = 5


def test_a_failed_describe_leaves_no_cycle() -> None:
    metadata = Metadata(django_settings.KAFKA)

    async def describe_missing() -> None:
        for _ in range(DESCRIBES):
            with pytest.raises(TopicNotFoundError):
                await metadata.describe(unique("missing"))

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        asyncio.run(describe_missing())
        gc.collect()
        left = [found for found in gc.garbage if isinstance(found, KafkaException)]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    assert left == []
